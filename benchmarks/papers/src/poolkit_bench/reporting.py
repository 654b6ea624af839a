"""What every ``poolkit bench`` command shares: the record of a run (settings, times, provenance), the result files
(results.csv, results.json, a plot, report.html) written atomically, the printed table, and the paired per-seed
difference to a baseline."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from poolkit.io import atomic_write
from poolkit.provenance import run_provenance

from .harness import Stopwatch


def run_record(benchmark: str, config, cost: dict, **more) -> dict:
    """What results.json holds of every run: ``benchmark`` (what it reproduces), the settings, ``cost`` (a
    :meth:`Stopwatch.record <poolkit_bench.harness.Stopwatch.record>`), the provenance, then ``more``."""
    return {"benchmark": benchmark, "settings": dataclasses.asdict(config), **cost, "provenance": run_provenance(),
            **more}


def write_outputs(out: Path, frame: pd.DataFrame, meta: dict, pictures: dict[str, tuple[str, Callable[[str], None]]],
                  *, title: str | None = None, tables: dict[str, pd.DataFrame] | None = None) -> None:
    """``frame`` as results.csv, ``meta`` as results.json and each picture ({caption: (PNG name, plot(path))}) in
    ``out``, each atomically; with ``title``, report.html too: the pictures, ``tables`` ({caption: frame}) and the
    run's settings and provenance (``meta`` without its per-run records and summary)."""
    atomic_write(out / "results.csv", lambda tmp: frame.to_csv(tmp, index=False))
    atomic_write(out / "results.json", lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=1) + "\n"))
    for name, plot in pictures.values():
        atomic_write(out / name, plot)
    if title is not None:
        from poolkit.explain.report import write_bench_report

        write_bench_report(out / "report.html", title, tables or {},
                           {caption: out / name for caption, (name, _) in pictures.items()},
                           {key: value for key, value in meta.items() if key not in ("runs", "summary")})


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


def versus_baseline(row, baseline: str, item: str = "pooler") -> str:
    """A summary row's paired difference to the baseline in points, ``(noise, unadjusted)`` when its own 95%
    t-interval holds 0: one comparison alone, where a docs page's verdicts Holm-adjust over the page's family."""
    if getattr(row, item) == baseline:
        return ""
    return f"{100 * row.diff_mean:+.2f} ± {100 * row.diff_std:.2f}" + (" (noise, unadjusted)" if row.inside_noise
                                                                          else "")


def draw_map(ax, image, weights, size: tuple[float, float] | None = None) -> None:
    """A picture, grey (H, W) or RGB (H, W, 3), with a pooler's weights over its last map (h, w) laid over it, stretched to the
    picture (or to ``size`` = (height, width) in picture units), coloured from 0 to the map's largest weight."""
    height, width = size or image.shape
    extent = (0, width, height, 0)
    ax.imshow(image, cmap="gray", interpolation="nearest", extent=extent)
    ax.imshow(weights, cmap="magma", alpha=0.6, vmin=0, vmax=max(float(weights.max()), 1e-12),
              interpolation="nearest", extent=extent)
    ax.set_xticks([])
    ax.set_yticks([])


def print_table(title: str, columns: list[str], rows, clock: Stopwatch, out: str | None) -> None:
    """A rich table of ``rows`` (strings, one per column, right-aligned), then the wall time on ``clock`` and where
    the results went."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(str(column), justify="right")
    for row in rows:
        table.add_row(*row)
    console = Console()
    if not console.is_terminal:  # piped: do not squeeze the table into 80 columns
        console = Console(width=200)
    console.print(table)
    console.print(f"took {clock.seconds():.0f} s" + (f"; wrote {out}" if out else ""))
