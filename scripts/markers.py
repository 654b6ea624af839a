"""Rendered blocks in a Markdown page: the text between ``<!-- begin:NAME -->`` and ``<!-- end:NAME -->`` is a
script's output, everything outside the markers is hand-written. Shared by the docs renderers (with ``span``,
their one range format).

A renderer gives ``main`` its page and a function returning {NAME: block text}; its command line is then

    (no option)   print the rendered blocks
    --check       exit 1 when the page's blocks differ from what the result files give
    --write       replace the page's blocks in place (atomically)
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

from poolkit.errors import PoolkitError
from poolkit.io import atomic_write_content

MARKER = re.compile(r"<!-- (begin|end):([\w-]+) -->")


def replace_blocks(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each marked block's content replaced by ``blocks[NAME]``; the page must mark exactly the
    blocks given, each once, begin before end."""
    found = [(m.group(1), m.group(2)) for m in MARKER.finditer(text)]
    names = [name for kind, name in found if kind == "begin"]
    if sorted(names) != sorted(blocks) or found != [(kind, n) for n in names for kind in ("begin", "end")]:
        raise PoolkitError(f"the page's markers {[f'{k}:{n}' for k, n in found]} do not pair up with the blocks "
                           f"{sorted(blocks)}: put one '<!-- begin:NAME -->' ... '<!-- end:NAME -->' around each")
    for name, body in blocks.items():
        pattern = re.compile(rf"(<!-- begin:{name} -->\n).*?(<!-- end:{name} -->)", re.S)
        content = body.strip("\n") + "\n" if body.strip("\n") else ""
        text, count = pattern.subn(lambda m: m.group(1) + content + m.group(2), text)
        if count != 1:
            raise PoolkitError(f"block {name!r}: its begin marker must end its line; put the block on the next line")
    return text


def main(doc: Path, render: Callable[[], dict[str, str]], description: str, argv: list[str] | None = None,
         add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """The renderer's command line (see the module docstring). ``render`` receives the parsed arguments and
    returns the blocks, or None when an option of its own (``add_arguments``) made it do something else."""
    parser = argparse.ArgumentParser(description=description)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"update {doc.name} in place")
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {doc.name} differs from the result files")
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    blocks = render(args)
    if blocks is None:  # the renderer did its own job (e.g. measured a result file)
        return 0
    old = doc.read_text()
    new = replace_blocks(old, blocks)
    if args.write:
        if new != old:
            atomic_write_content(doc, new)
        print(f"{doc}: {len(blocks)} block(s) {'updated' if new != old else 'already up to date'}")
    elif args.check:
        if new != old:
            stale = [name for name, body in blocks.items() if current(old, name) != body.strip("\n")]
            print(f"{doc} differs from its result files in block(s) {stale}: rerun its renderer with --write")
            return 1
    else:
        print("\n\n".join(f"<!-- {name} -->\n{body}" for name, body in blocks.items()))
    return 0


def span(values, fmt: str = "{:.2f}", unit: str = "") -> str:
    """The range of ``values`` as text, e.g. '1.53 to 2.05x' (one value when both ends print alike)."""
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low + unit if low == high else f"{low} to {high}{unit}"


def current(text: str, name: str) -> str:
    """The page's present content of block ``name``."""
    return re.search(rf"<!-- begin:{name} -->\n(.*?)\n?<!-- end:{name} -->", text, re.S).group(1)
