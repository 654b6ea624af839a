"""``poolkit data list``: the built-in datasets."""

from __future__ import annotations

import argparse


def run_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..data import list_datasets

    table = Table(title="built-in datasets (use as --data builtin:NAME)")
    for column in ("name", "task", "description", "needs"):
        table.add_column(column)
    for info in list_datasets():
        table.add_row(info.name, info.task, info.description, info.needs or "nothing (ships with poolkit)")
    Console().print(table)
    return 0
