"""How poolkit words counts and sizes in what it prints: "1 epoch", "3 epochs", "12.5 MiB"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural (``plural``, default noun + "s") unless the count is one: '1 text', '2 texts'."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def size(nbytes: int) -> str:
    """A size in bytes as people read it: '512 B', '12.5 MiB', '3.20 GiB'."""
    if nbytes < 2**10:
        return f"{nbytes} B"
    if nbytes < 2**30:
        return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"
    return f"{nbytes / 2**30:.2f} GiB"
