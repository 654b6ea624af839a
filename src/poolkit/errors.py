"""The one error type poolkit raises for bad input: a one-line message naming the problem and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PoolkitError(ValueError):
    """Bad input or configuration. The CLI prints ``error: <message>`` and exits with code 2."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ' Did you mean 'x'?' for the closest of ``choices``, or '' when none is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=3, cutoff=0.5)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"
