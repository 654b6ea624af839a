"""How poolkit words counts in what it prints: "1 epoch", "3 epochs"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural (``plural``, default noun + "s") unless the count is one: '1 text', '2 texts'."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
