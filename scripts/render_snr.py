"""docs/snr.md's numbers, rendered from the committed result files in docs/snr/.

    .venv/bin/python scripts/render_snr.py --baselines    # measure the analytic baselines -> docs/snr/baselines.json
    .venv/bin/python scripts/render_snr.py --check        # exit 1 when the page differs from the files
    .venv/bin/python scripts/render_snr.py --write        # update the page's marked blocks

Sources: ``baselines.json`` (this script's ``--baselines``), ``results.csv`` and ``results.json`` (the committed
``poolkit bench snr --quick`` run).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import markers  # noqa: E402
from markers import span  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "snr.md"
FOLDER = ROOT / "docs" / "snr"
POOLERS = ("adapool", "mean", "max", "cls")
BASELINES = ("baseline_mean", "baseline_x0")
LOW_SNR = (4, 32)  # the paper's claims are about SNR 0.03-0.25: K = 4 ... 32 of N = 128


def measure_baselines(samples: int = 100_000, seed: int = 42) -> None:
    """The two analytic baselines (and the mean without vector 0) on ``samples`` generated samples -> baselines.json."""
    import torch

    from poolkit.bench.snr_data import PAPER_KS, PUBLISHED_BASELINES, baseline_mse, make_knn_centroid
    from poolkit.io import atomic_write_json
    from poolkit.provenance import run_provenance

    data = make_knn_centroid(samples, seed=seed)
    measured: dict[str, dict[int, float]] = {name: {} for name in (*BASELINES, "baseline_mean_without_x0")}
    for k in PAPER_KS:
        target = data.targets[k].double()
        for name, value in baseline_mse(data.x, data.targets[k]).items():
            measured[name][k] = value
        measured["baseline_mean_without_x0"][k] = torch.mean((data.x[:, 1:].double().mean(1) - target) ** 2).item()
    atomic_write_json(FOLDER / "baselines.json", {
        "script": "scripts/render_snr.py --baselines", "provenance": run_provenance(),
        "settings": {"samples": samples, "data_seed": seed, "num_vectors": data.x.shape[1], "dim": data.x.shape[2]},
        "measured": measured, "published": PUBLISHED_BASELINES})
    print(f"wrote {FOLDER / 'baselines.json'}")


# -- formatting ---------------------------------------------------------------------------------------
def snr(k: int, n: int) -> str:
    return f"{k / n:.4f}".rstrip("0").rstrip(".")


def mse(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if abs(value) >= 10 ** -digits else f"{value:.1e}"


def ks_text(ks: list[int], every: list[int]) -> str:
    """The K values in ``ks`` as text ("every K" when they are all of ``every``)."""
    return "every K" if ks == every else "no K" if not ks else "K = " + ", ".join(str(k) for k in ks)


# -- the blocks ---------------------------------------------------------------------------------------
def load() -> tuple[dict, dict, dict]:
    """(baselines.json, results.json, {pooler: {K: (mean, std)}} from results.csv)."""
    cells: dict[str, dict[int, tuple[float, float]]] = {}
    with open(FOLDER / "results.csv", newline="") as f:
        for row in csv.DictReader(f):
            cells.setdefault(row["pooler"], {})[int(row["K"])] = (float(row["mse_mean"]), float(row["mse_std"]))
    return (json.loads((FOLDER / "baselines.json").read_text()), json.loads((FOLDER / "results.json").read_text()),
            cells)


def render_baselines(base: dict) -> dict[str, str]:
    got, pub, n = base["measured"], base["published"], base["settings"]["num_vectors"]
    lines = [f"Ours: {base['settings']['samples']:,} samples, data seed {base['settings']['data_seed']} "
             f"(`docs/snr/baselines.json`, made by `scripts/render_snr.py --baselines`); published: the paper's code, "
             "the last 10% of its 1M samples.", "",
             "| K | SNR | mean-of-all (ours) | published | diff | vector 0 (ours) | published | diff |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    diffs = []
    for k in got["baseline_mean"]:
        row = [k, snr(int(k), n)]
        for name in BASELINES:
            diffs.append(got[name][k] / pub[name][k] - 1)
            row += [mse(got[name][k], 5), mse(pub[name][k], 5), f"{diffs[-1]:+.1%}"]
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    within = math.ceil(max(abs(d) for d in diffs) * 1000) / 10
    lines += ["", f"All {len(diffs)} values are within {within:.1f}% of the published ones."]
    without = got["baseline_mean_without_x0"]
    at_128 = "0 up to float64 rounding" if without["128"] < 1e-12 else mse(without["128"])
    exclusion = (f"- The mean-of-all baseline includes vector 0. Excluding it gives {at_128} at "
                 f"K = 128 (published: {mse(pub['baseline_mean']['128'])}) and "
                 f"{without['32'] / pub['baseline_mean']['32'] - 1:+.1%} at K = 32 (`docs/snr/baselines.json`).")
    return {"baselines": "\n".join(lines), "baseline-exclusion": exclusion}


def render_runtime(results: dict) -> str:
    s, runs = results["settings"], results["runs"]
    cpu = [r["cpu_seconds"] for r in runs]
    return (f"The committed quick run (`docs/snr/results.json`: `runtime_seconds`, each run's `cpu_seconds`) is "
            f"{len(s['poolers'])} poolers × {len(s['ks'])} K × {s['seeds']} seeds = {len(runs)} runs of "
            f"{s['epochs']} epochs. Its runs used {sum(cpu):.0f} CPU-seconds in all "
            f"(median {statistics.median(cpu):.1f} "
            f"per run, {statistics.median(cpu) / s['epochs']:.2f} per epoch including validation), and the whole "
            f"command took {results['runtime_seconds'] / 60:.0f} minutes of wall time with {s['workers']} workers of "
            f"{s['threads']} torch thread each on a machine that other jobs shared (`platform` and `torch` in the "
            "file).")


def render_settings(full, quick) -> str:
    """The two presets side by side (``poolkit.bench.FULL`` / ``QUICK``)."""
    def column(c) -> list[str]:
        test = int(c.num_samples * c.test_ratio)  # as the runner splits
        val = (c.num_samples - test) // c.folds
        threads = "torch's default threads" if c.threads is None else f"{c.threads} torch thread each"
        return [f"{c.num_samples:,} (train {c.num_samples - test - val:,} / val {val:,} / test {test:,})",
                f"{c.layers} layer(s), {c.heads} head(s), width {c.dim}, FF {c.ff}",
                f"Adam lr {c.lr:g}, batch {c.batch_size}", str(c.epochs),
                f"{c.seeds} (folds 1-{c.seeds} of {c.folds})", " ".join(c.poolers),
                f"{c.workers} worker process(es), `--device {c.device}`, {threads}"]
    names = ["samples", "encoder", "optimiser", "epochs", "runs per cell", "poolers", "execution"]
    rows = ["Rendered from `poolkit.bench.FULL` and `QUICK`:", "", "| setting | `--full` (the paper) | `--quick` |",
            "|---|---|---|"]
    rows += [f"| {n} | {a} | {b} |" for n, a, b in zip(names, column(full), column(quick))]
    return "\n".join(rows)


def render_full(full) -> str:
    runs = len(full.poolers) * len(full.ks) * full.seeds
    train = full.num_samples * (1 - full.test_ratio) * (1 - 1 / full.folds)
    gigabytes = full.num_samples * full.num_vectors * full.dim * 4 / 1e9
    return (f"`--full` matches the paper (`poolkit.bench.FULL`): {runs} runs of {full.epochs} epochs over "
            f"{train / 1000:.0f}k training samples each. It holds the {full.num_samples:,} × {full.num_vectors} × "
            f"{full.dim} inputs ({gigabytes:.1f} GB as float32) on the device.")


def render_results(results: dict, cells: dict) -> str:
    s = results["settings"]
    columns = [*s["poolers"], *BASELINES]
    test = int(s["num_samples"] * s["test_ratio"])
    lines = [f"Test MSE of the committed run (`docs/snr/results.csv`; settings and every run in `results.json`): "
             f"each pooler cell is the mean ± sample std over {s['seeds']} seeds; the baselines are analytic, on the "
             f"same {test} test samples.", "",
             "| K | SNR | " + " | ".join(columns) + " |", "|---:|---:|" + "---:|" * len(columns)]
    for k in s["ks"]:
        row = [str(k), snr(k, s["num_vectors"])]
        for name in columns:
            m, sd = cells[name][k]
            row.append(mse(m) + ("" if name in BASELINES else f" ± {mse(sd)}"))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def render_claims(results: dict, cells: dict) -> str:
    """The comparisons with the paper's claims, each computed from results.csv / results.json."""
    ks = results["settings"]["ks"]
    low = [k for k in ks if LOW_SNR[0] <= k <= LOW_SNR[1]]
    m = {p: {k: cells[p][k][0] for k in ks} for p in cells}

    def ratios(num: str, den: str, among=ks) -> list[float]:
        return [m[num][k] / m[den][k] for k in among]

    per_k = ", ".join(f"{r:.2f} at K = {k}" for k, r in zip(ks, ratios("mean", "adapool")))
    mean_wins = [k for k in ks if m["mean"][k] < m["adapool"][k]]
    above_base = [k for k in ks if m["mean"][k] > m["baseline_mean"][k]]
    cls_gap = [m["adapool"][k] / m["cls"][k] - 1 for k in ks]
    cls_wins = [k for k in ks if m["cls"][k] < m["adapool"][k]]
    beat_both = {p: [k for k in ks if m[p][k] < min(m["baseline_mean"][k], m["baseline_x0"][k])]
                 for p in ("adapool", "cls")}
    worse_x0 = [k for k in ks if m["adapool"][k] > m["baseline_x0"][k]]
    worse_mean = [k for k in ks if m["adapool"][k] > m["baseline_mean"][k]]
    runs = results["runs"]
    last = {p: [r["best_epoch"] == len(r["val_loss"]) - 1 for r in runs if r["pooler"] == p] for p in POOLERS}
    rel_std = {p: statistics.mean(cells[p][k][1] / cells[p][k][0] for k in ks) for p in POOLERS}
    steadier = [p for p in POOLERS if rel_std[p] < rel_std["adapool"]]
    return "\n".join([
        f"- **adapool vs mean:** mean / adapool is {per_k} (`results.csv`); over K = {low[0]}-{low[-1]} it is "
        f"{span(ratios('mean', 'adapool', low), unit='x')}. Mean pooling has the lower MSE at "
        f"{ks_text(mean_wins, ks)}, "
        f"and it stays above the mean-of-all analytic baseline at {ks_text(above_base, ks)}.",
        f"- **adapool vs max:** max / adapool is {span(ratios('max', 'adapool', low), '{:.0f}', 'x')} over "
        f"K = {low[0]}-{low[-1]}. The best epoch of max pooling was the last one in {sum(last['max'])} of its "
        f"{len(last['max'])} runs (`results.json`, `runs[].best_epoch`).",
        f"- **adapool vs cls:** adapool's MSE relative to cls's is {span([100 * g for g in cls_gap], '{:+.1f}', '%')}; "
        f"cls has the lower MSE at {ks_text(cls_wins, ks)}.",
        f"- **Against the analytic baselines:** adapool beats both at {ks_text(beat_both['adapool'], ks)}, cls at "
        f"{ks_text(beat_both['cls'], ks)}. adapool is worse than predicting vector 0 at {ks_text(worse_x0, ks)} and "
        "worse "
        f"than predicting the mean of all vectors at {ks_text(worse_mean, ks)}.",
        "- **Variance across seeds:** the sample std as a share of the MSE, averaged over K: "
        + ", ".join(f"{p} {100 * rel_std[p]:.1f}%" for p in POOLERS) + f" (adapool's std: "
        f"{span([cells['adapool'][k][1] for k in ks], '{:.4f}')}). The paper's lower variance for adapool is "
        + ("reproduced." if not steadier else f"not reproduced against {', '.join(steadier)}."),
        f"- **Training budget:** for {sum(map(sum, last.values()))} of the {len(runs)} runs the best epoch was the "
        f"last one (" + ", ".join(f"{p} {sum(last[p])} of {len(last[p])}" for p in POOLERS) + ")."])


def render(args: argparse.Namespace) -> dict[str, str] | None:
    if args.baselines:
        measure_baselines()
        return None
    from poolkit.bench.snr import FULL, QUICK

    base, results, cells = load()
    return {**render_baselines(base), "runtime": render_runtime(results), "full": render_full(FULL),
            "settings": render_settings(FULL, QUICK),
            "results": render_results(results, cells), "claims": render_claims(results, cells)}


def main(argv: list[str] | None = None) -> int:
    return markers.main(DOC, render, __doc__.split("\n\n")[0], argv, lambda parser: parser.add_argument(
        "--baselines", action="store_true", help="measure the analytic baselines into docs/snr/baselines.json"))


if __name__ == "__main__":
    sys.exit(main())
