"""What the reading tests of several pages share: a verdict of the page's verdicts block turned into its opposite."""

from __future__ import annotations

import rendering


def with_verdict_flipped(text: str, row_marker: str, beats: str, noise: str) -> str:
    """``text`` (a page) with the verdict of the verdicts block's row holding ``row_marker`` turned into the other
    outcome: ``beats`` when it reads inside the noise, else ``noise`` (whichever the committed run gave)."""
    block = rendering.current(text, "verdicts")
    row = next(line for line in block.splitlines() if row_marker in line)
    reading = row.rstrip(" |").rsplit("| ", 1)[1]
    other = beats if "inside the noise" in reading else noise
    return text.replace(row, row.replace(f"| {reading} |", f"| {other} |"))
