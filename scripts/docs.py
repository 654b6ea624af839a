"""The docs tool: every docs page whose numbers come from committed result files, rendered by one command.

    .venv/bin/python scripts/docs.py                      # list the pages and whether each is up to date
    .venv/bin/python scripts/docs.py --check [PAGE ...]   # exit 1 naming each page and block that differs
    .venv/bin/python scripts/docs.py --write [PAGE ...]   # render those pages in place (atomically)

A page registers itself: a module in scripts/pages/ that defines ``PAGE`` (a ``rendering.Page``). Its renderer
reads only committed files (a benchmark's run folder, benchmarks/results/*.json), so a number in a page that
differs from its files -- typed by hand, or a result re-run and not re-rendered -- fails ``--check``, which
``make test`` runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from poolkit.errors import PoolkitError
from poolkit.io import atomic_write_content

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rendering import Page  # noqa: E402


def registered() -> list[str]:
    """The names of the pages in scripts/pages/ (a module's name, with hyphens)."""
    return sorted(path.stem.replace("_", "-") for path in (Path(__file__).resolve().parent / "pages").glob("*.py"))


def load(name: str) -> Page:
    return importlib.import_module(f"pages.{name.replace('-', '_')}").PAGE


def main(argv: list[str] | None = None, pages: dict[str, Page] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when a page differs from its result files")
    mode.add_argument("--write", action="store_true", help="render the pages in place")
    parser.add_argument("names", nargs="*", metavar="PAGE", help="the pages to check or write (default: all)")
    args = parser.parse_args(argv)
    names = registered() if pages is None else list(pages)
    unknown = [name for name in args.names if name not in names]
    if unknown:
        parser.error(f"no page {', '.join(unknown)}: choose from {', '.join(names)}")
    failed = 0
    for name in args.names or names:
        page = pages[name] if pages is not None else load(name)
        text = page.file().read_text()
        try:
            new, stale = page.update(text)
            if args.write and stale:
                atomic_write_content(page.file(), new)
        except PoolkitError as error:  # markers that do not pair up with the render
            print(f"{page.path}: {error}")
            failed += 1
            continue
        if args.write:
            print(f"{page.path}: " + (f"rendered {', '.join(stale)}" if stale else "up to date"))
        elif stale:
            print(f"{page.path} differs from its result files in {', '.join(stale)}: run scripts/docs.py --write "
                  f"{name}")
            failed += 1
        elif not args.check:
            print(f"{page.path}: up to date")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
