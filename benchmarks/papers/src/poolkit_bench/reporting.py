"""What every ``poolkit bench`` command shares: the result files (results.csv, results.json, a plot) written
atomically, the --quick / --full presets and the --out / --force / --no-progress arguments, the printed table, and
the paired per-seed difference to a baseline."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from poolkit.io import atomic_write


def write_results(out: Path, frame: pd.DataFrame, meta: dict, plot_name: str, plot: Callable[[str], None]) -> None:
    """``frame`` as results.csv, ``meta`` as results.json and ``plot(path)`` as ``plot_name`` in ``out``, each
    atomically."""
    atomic_write(out / "results.csv", lambda tmp: frame.to_csv(tmp, index=False))
    atomic_write(out / "results.json", lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=1) + "\n"))
    atomic_write(out / plot_name, plot)


def paired_difference(diff) -> tuple[float, float, float, bool]:
    """Per-seed differences to a baseline -> (mean, sample std, half-width of the 95% t-interval, whether that
    interval contains 0: inside seed noise); std and half-width are NaN for one seed."""
    from scipy import stats

    diff = np.asarray(diff, dtype=np.float64)
    n = len(diff)
    std = float(diff.std(ddof=1)) if n > 1 else float("nan")
    half = float(stats.t.ppf(0.975, n - 1) * std / np.sqrt(n)) if n > 1 else float("nan")
    mean = float(diff.mean())
    return mean, std, half, not abs(mean) > half


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, title: str | None = None) -> None:
    """Give ``fig`` its small suptitle, lay it out, write it as PNG to ``path`` and close it."""
    if title is not None:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    pyplot().close(fig)


def write_report(out: Path, title: str, meta: dict, tables: dict[str, pd.DataFrame], pictures: dict[str, str]) -> None:
    """report.html in ``out``: ``pictures`` ({caption: a PNG's name in ``out``}), ``tables`` ({caption: frame}) and
    the run's settings and provenance (``meta`` without its per-run records and summary)."""
    from poolkit.explain.report import write_bench_report

    write_bench_report(out / "report.html", title, tables, {caption: out / name for caption, name in pictures.items()},
                       {key: value for key, value in meta.items() if key not in ("runs", "summary")})


def draw_map(ax, image, weights, size: tuple[float, float] | None = None) -> None:
    """A grey picture (H, W) with a pooler's weights over its last map (h, w) laid over it, stretched to the
    picture (or to ``size`` = (height, width) in picture units), coloured from 0 to the map's largest weight."""
    height, width = size or image.shape
    extent = (0, width, height, 0)
    ax.imshow(image, cmap="gray", interpolation="nearest", extent=extent)
    ax.imshow(weights, cmap="magma", alpha=0.6, vmin=0, vmax=max(float(weights.max()), 1e-12),
              interpolation="nearest", extent=extent)
    ax.set_xticks([])
    ax.set_yticks([])


def add_preset_arguments(parser: argparse.ArgumentParser, quick: str, full: str, default: str = "default") -> None:
    """--quick / --full, stored as ``args.preset`` (``default`` when neither is given); the strings are their help."""
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", dest="preset", action="store_const", const="quick", default=default, help=quick)
    scale.add_argument("--full", dest="preset", action="store_const", const="full", help=full)


def add_output_arguments(parser: argparse.ArgumentParser, plot_name: str) -> None:
    """--out DIR, --force and --no-progress."""
    parser.add_argument("--out", metavar="DIR", help=f"write results.csv, results.json and {plot_name} here")
    parser.add_argument("--force", action="store_true", help="overwrite existing results in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def print_report(table, started: float, out: str | None) -> None:
    """A rich table, then the wall time since ``started`` (perf_counter) and where the results went."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # piped: do not squeeze the table into 80 columns
        console = Console(width=200)
    console.print(table)
    console.print(f"took {time.perf_counter() - started:.0f} s" + (f"; wrote {out}" if out else ""))
