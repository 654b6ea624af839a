"""What the reading tests of every research page share: the first row of a page's verdicts block, and the page with
that row's verdict turned into the other outcome."""

from __future__ import annotations

import re

import rendering

#: a verdicts row: | measure | A − B | difference | test | p | Holm p | verdict |
ROW = re.compile(r"^\| [^|]+ \| (?P<a>[^|]+?) − (?P<b>[^|]+?) \|.*\| (?P<verdict>[^|]+) \|$")


def first_verdict(text: str) -> re.Match:
    """The first row of the page's verdicts block that compares two conditions, as a :data:`ROW` match."""
    return next(match for line in rendering.current(text, "verdicts").splitlines() if (match := ROW.match(line)))


def with_first_verdict_flipped(text: str) -> str:
    """``text`` (a page) with the first verdicts row's reading turned into the other outcome: "A beats B" when the
    committed run read it inside the noise, else "A and B: inside the noise"."""
    row = first_verdict(text)
    a, b, reading = row["a"], row["b"], row["verdict"]
    other = f"{a} beats {b}" if reading.endswith("inside the noise") else f"{a} and {b}: inside the noise"
    line = row.group(0)
    return text.replace(line, line[:row.start("verdict")] + other + line[row.end("verdict"):], 1)
