"""What every docs page renderer shares: the page (``Page``), its marked blocks, and the Markdown they are made of.

A rendered block in a Markdown page is the text between ``<!-- begin:NAME -->`` and ``<!-- end:NAME -->``: a
renderer's output. Everything outside the markers is hand-written. A page whose ``render`` returns one string is
rendered whole. ``scripts/docs.py`` checks and writes every registered page (``scripts/pages/*.py``, one ``PAGE``
each).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poolkit.errors import PoolkitError

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- (begin|end):(.+?) -->")


@dataclass(frozen=True)
class Page:
    """A docs page (``path``, from the repository root) and its renderer: ``render()`` returns {NAME: block text}
    for the page's marked blocks, or the whole page as one string."""

    path: str
    render: Callable[[], dict[str, str] | str]
    readings: bool = False

    def file(self, root: Path = ROOT) -> Path:
        return root / self.path

    def update(self, text: str) -> tuple[str, list[str]]:
        """The page as its result files give it, from its present ``text`` (only the marked blocks change), and
        the blocks of ``text`` that differ from that (['whole page'] for a page rendered whole). A page with
        ``readings`` (a research page) may compare conditions only inside rendered blocks: a hand-written claim
        outside them is refused (:func:`hand_written_claims`)."""
        if self.readings and (claims := hand_written_claims(text)):
            raise PoolkitError(f"hand-written readings outside the rendered blocks ({'; '.join(claims)}): a "
                               "reading that compares two conditions is rendered from its test (scripts/verdicts.py); "
                               "move it into a rendered block or reword it")
        blocks = self.render()
        if isinstance(blocks, str):
            return blocks, [] if blocks == text else ["whole page"]
        new = replace_blocks(text, blocks)
        return new, [name for name, body in blocks.items() if current(text, name) != body.strip("\n")]


def replace_blocks(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each marked block's content replaced by ``blocks[NAME]``; the page must mark exactly the
    blocks given, each once, begin before end."""
    found = [(m.group(1), m.group(2)) for m in MARKER.finditer(text)]
    names = [name for kind, name in found if kind == "begin"]
    if sorted(names) != sorted(blocks) or found != [(kind, n) for n in names for kind in ("begin", "end")]:
        missing, extra = sorted(set(blocks) - set(names)), sorted(set(names) - set(blocks))
        raise PoolkitError(f"the page's markers do not pair up with the blocks (not marked: {missing}; marked but "
                           f"not rendered: {extra}): put one '<!-- begin:NAME -->' ... '<!-- end:NAME -->' around "
                           "each block, once")
    for name, body in blocks.items():
        pattern = re.compile(rf"(<!-- begin:{re.escape(name)} -->\n).*?(<!-- end:{re.escape(name)} -->)", re.S)
        content = body.strip("\n") + "\n" if body.strip("\n") else ""
        text, count = pattern.subn(lambda m: m.group(1) + content + m.group(2), text)
        if count != 1:
            raise PoolkitError(f"block {name!r}: its begin marker must end its line; put the block on the next line")
    return text


#: the words of a reading that compares two conditions: only a rendered block, worded from its test, may use them
CLAIM = re.compile(r"\b(beats?|beaten|outperform\w*|better than|worse than|higher than|lower than|inside the noise|"
                   r"beyond (?:seed )?noise|detectabl\w*|significant\w*|costs? less|ahead|wins?|won|helps?|"
                   r"stronger|weaker|superior|inferior)\b", re.I)


def hand_written_claims(text: str) -> list[str]:
    """'line N: "word"' for each claim word (:data:`CLAIM`) in ``text`` outside its rendered blocks, code blocks and
    quotations (a '>' line: the paper's words, not a reading)."""
    found, in_block, in_code = [], False, False
    for number, line in enumerate(text.splitlines(), 1):
        if markers := list(MARKER.finditer(line)):
            before = line[:markers[0].start()] if not in_block else ""
            outside = before + " " + (line[markers[-1].end():] if markers[-1].group(1) == "end" else "")
            in_block = markers[-1].group(1) == "begin"
        elif not in_block and line.lstrip().startswith("```"):
            in_code, outside = not in_code, ""
        else:
            outside = "" if in_block or in_code or line.lstrip().startswith(">") else line
        found += [f'line {number}: "{m.group(0)}"' for m in CLAIM.finditer(outside)]
    return found


def current(text: str, name: str) -> str:
    """The page's present content of block ``name``."""
    return re.search(rf"<!-- begin:{re.escape(name)} -->\n(.*?)\n?<!-- end:{re.escape(name)} -->", text,
                     re.S).group(1)


def table(header: Sequence[Any], rows: Iterable[Sequence[Any]], align: str = "", padded: bool = False,
          title: str | None = None) -> str:
    """A Markdown table. ``align``: one letter per column, ``l`` (the default for columns it does not reach) or
    ``r``; ``padded``: every column as wide as its widest cell, readable in a terminal too (floats then print with
    2 decimals, or none from 100 up), under ``title`` when one is given."""
    cells = [[_padded(c) if padded else str(c) for c in row] for row in rows]
    header = [str(h) for h in header]
    if padded:
        widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
        lines = [_row(h.ljust(w) for h, w in zip(header, widths)), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        lines += [_row(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
        return "\n".join(lines if title is None else [f"\n{title}\n", *lines])
    rule = "|" + "|".join("---:" if align[i:i + 1] == "r" else "---" for i in range(len(header))) + "|"
    return "\n".join([_row(header), rule, *(_row(row) for row in cells)])


def _row(cells: Iterable[str]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def _padded(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.0f}" if value >= 100 else f"{value:.2f}"
    return str(value)


def span(values, fmt: str = "{:.2f}", unit: str = "") -> str:
    """The range of ``values`` as text, e.g. '1.53 to 2.05x' (one value when both ends print alike)."""
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return low + unit if low == high else f"{low} to {high}{unit}"


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def run_files(folder: Path) -> tuple[dict, Any]:
    """A benchmark run folder's ``results.json`` and ``results.csv`` (as a DataFrame)."""
    import pandas as pd

    return read_json(folder / "results.json"), pd.read_csv(folder / "results.csv")


def presets_table(module: str, presets, column: Callable[[Any], list[str]], names: list[str]) -> str:
    """A benchmark's three presets side by side (``module``'s PRESETS: default, --full, --quick): a row per setting
    in ``names``, each preset's cells from ``column(preset)``."""
    columns = [column(presets[name]) for name in ("default", "full", "quick")]
    return "\n".join([f"Rendered from `{module}.PRESETS`:", "",
                      table(["setting", "default", "`--full`", "`--quick`"],
                            [[name, *(cells[i] for cells in columns)] for i, name in enumerate(names)])])


def changed_settings(settings: dict, default) -> str:
    """The run's ``settings`` that differ from the ``default`` preset, as 'key value; ...' ('none' when none do)."""
    changed = [f"{key} {value}" for key, value in settings.items()
               if key != "preset" and json.loads(json.dumps(getattr(default, key))) != value]
    return "; ".join(changed) or "none"


#: The generation ``poolkit.provenance.cpu_model`` puts after a CPU's name: "(family 23 model 49; avx2)", on ARM
#: "(implementer 0x41 part 0xd40; i8mm)".
GENERATION = re.compile(r"\(((?:family \d+ model \d+|implementer \S+ part \S+)[^()]*)\)$")


def machine(cpu: str, cores: int) -> str:
    """A CPU and its core count in words, in one pair of brackets: "Intel(R) Xeon(R) Processor (2 cores)", "AMD EPYC
    (family 23 model 49; avx2; 2 cores)"."""
    generation = GENERATION.search(cpu)
    if generation is None:
        return f"{cpu} ({cores} cores)"
    return f"{cpu[:generation.start()]}({generation.group(1)}; {cores} cores)"


def made_at(prov: dict) -> str:
    """A run's commit, torch and machine as its provenance records them: "0123456789, torch 2.13.0+cpu, AMD EPYC
    (family 23 model 49; avx2; 2 cores)"."""
    return f"{(prov.get('commit') or 'unknown')[:10]}, torch {prov['torch']}, {machine(prov['cpu'], prov['cores'])}"


def load_and_machine(results: dict) -> str:
    """A benchmark run's 1-minute load average at its start and end, then its commit, torch and CPU."""
    prov, (start, end) = results["provenance"], results["load_average_start_end"]
    return (f"Load average (1 min) {start[0]:.1f} at the start, {end[0]:.1f} at the end. Commit "
            f"{prov['commit'][:10] if prov.get('commit') else 'unknown'}, torch {prov['torch']}, {prov['cpu']}.")


def points(share: float, digits: int = 2) -> str:
    """A share as percentage points: 0.1234 -> '12.34'."""
    return f"{100 * share:.{digits}f}"


def difference(mean: float, std: float, digits: int = 2) -> str:
    """A paired difference of shares in points, mean ± sample std: '+0.12 ± 0.30' (its test, where it has one, is
    a page's verdict: scripts/verdicts.py)."""
    return f"{100 * mean:+.{digits}f} ± {points(std, digits)}"


def accuracy_cells(row, baseline: bool, mark: str) -> list[str]:
    """A summary row's two table cells: accuracy in %, mean ± sample std over seeds, and its paired difference to
    the baseline (mean ± sample std of the per-seed differences, then its verdict's ``mark``; '—' for the
    baseline itself)."""
    return [f"{points(row['mean'])} ± {points(row['std'])}",
            "—" if baseline else difference(row["diff_mean"], row["diff_std"]) + mark]
