"""docs/operator.md's numbers, rendered from the committed run in docs/operator/ (``poolkit bench operator``), and
its readings, each from a declared test (:func:`comparisons`: test relative L2 per seed, lower is better, paired t,
Holm-adjusted over the page).
"""

from __future__ import annotations

from rendering import ROOT, Page, load_and_machine, run_files, span, table
from verdicts import Comparison, Verdicts, last_epochs

from poolkit_bench.neural_operator import UNWEIGHTED

FOLDER = ROOT / "docs" / "operator"
ATTENTION, FNO = "attention", "fno"


def cell_name(model: str, grid: str, resolution: int) -> str:
    """A condition of the page: 'attention at 128' (uniform grids) or 'attention at 64 clustered'."""
    return f"{model} at {resolution}" + (" clustered" if grid == "clustered" else "")


def values(frame, model: str, grid: str, resolution: int) -> list[float]:
    """Test rel L2 of (model, grid, resolution), in seed order."""
    rows = frame[(frame["model"] == model) & (frame["grid"] == grid) & (frame["resolution"] == resolution)]
    return rows.sort_values("seed")["rel_l2"].tolist()


def comparisons(results: dict, frame) -> list[Comparison]:
    """On test rel L2 (lower is better), paired by seed: the attention operator against the FNO at every uniform
    resolution; each model at every other uniform resolution against itself at the training resolution (the
    discretisation-invariance claim); on each clustered grid the attention operator with its quadrature weights
    against the same network without them."""
    s = results["settings"]
    train, models = s["train_resolution"], s["models"]
    found = []

    def compare(a: tuple, b: tuple) -> None:
        found.append(Comparison(f"{cell_name(*a)} vs {cell_name(*b)}", cell_name(*a), cell_name(*b),
                                values(frame, *a), values(frame, *b), "test rel L2", higher_is_better=False,
                                scale=1.0, unit="", digits=4))

    if {ATTENTION, FNO} <= set(models):
        for r in s["test_resolutions"]:
            compare((ATTENTION, "uniform", r), (FNO, "uniform", r))
    for model in models:
        for r in s["test_resolutions"]:
            if r != train:
                compare((model, "uniform", r), (model, "uniform", train))
    if ATTENTION in models:
        for r in s["clustered_resolutions"]:
            compare((ATTENTION, "clustered", r), (UNWEIGHTED, "clustered", r))
    return found


def render_run(results: dict) -> str:
    s = results["settings"]
    return (f"The committed run (`docs/operator/results.json`): {len(results['runs'])} training runs "
            f"({', '.join(s['models'])} × {s['seeds']} seeds), {results['runtime_seconds'] / 60:.1f} minutes of wall "
            f"time ({results['cpu_seconds'] / 60:.1f} CPU-minutes, {results['data_seconds']:.0f} s of them solving the "
            f"data) with {s['workers']} worker(s) of {s['threads']} torch thread each. Burgers' equation with "
            f"viscosity {s['nu']:g} on {s['fine']} points, to T = 1; {s['train']} training, {s['val']} validation "
            f"and {s['test']} test samples; trained at {s['train_resolution']} points, tested on uniform grids of "
            f"{', '.join(map(str, s['test_resolutions']))} points and clustered grids of "
            f"{', '.join(map(str, s['clustered_resolutions'])) or 'no'} points (spacing "
            f"{1 - s['clustered_strength']:.1f}/N to {1 + s['clustered_strength']:.1f}/N). The attention operator: "
            f"width {s['width']}, {s['layers']} block{'' if s['layers'] == 1 else 's'}, {s['heads']} heads; the FNO: "
            f"{s['fno_layers']} Fourier layers of {s['modes']} modes at the width that matches its parameters. Adam "
            f"lr {s['lr']:g}, batch {s['batch_size']}, {s['epochs']} epochs, the epoch with the lowest validation "
            "error at the training resolution scored once on each test grid. " + load_and_machine(results))


def render_table(results: dict, frame) -> str:
    """Per (model, grid, resolution): test rel L2, mean ± sample std over seeds and the seeds' range."""
    s = results["settings"]
    rows = []
    for (model, grid, resolution), part in frame.groupby(["model", "grid", "resolution"], sort=False):
        errors = part.sort_values("seed")["rel_l2"]
        marker = " (training)" if grid == "uniform" and resolution == s["train_resolution"] else ""
        rows.append([f"`{model}`", grid, f"{resolution}{marker}", f"{int(part['params'].iloc[0]):,}",
                     f"{errors.mean():.4f} ± {errors.std():.4f}", span(errors.tolist(), "{:.4f}")])
    return "\n".join([
        f"Test relative L2 error, mean ± sample std over {s['seeds']} seeds, and its range "
        "(`docs/operator/results.csv`, one row per model, seed and grid); `attention_unweighted` is the trained "
        "attention operator scored without its quadrature weights (plain softmax), on the clustered grids only; "
        "the FNO's FFT needs a uniform grid.", "",
        table(["model", "grid", "points", "parameters", "test rel L2", "range"], rows, align="llrrrr")])


def render_findings(results: dict, verdicts: Verdicts) -> str:
    s = results["settings"]
    groups = {
        "Attention operator against the FNO, per resolution": [v for v in verdicts if FNO in v.comparison.b
                                                               and v.comparison.a.startswith(ATTENTION)],
        f"Each model at another resolution against itself at {s['train_resolution']} points (discretisation "
        "invariance)": [v for v in verdicts if v.comparison.b.endswith(f" at {s['train_resolution']}")
                        and v.comparison.a.split(" at ")[0] == v.comparison.b.split(" at ")[0]],
        "Quadrature weights on the clustered grids": [v for v in verdicts if UNWEIGHTED in v.comparison.b]}
    lines = [f"Each reading from its test in the verdicts below (test rel L2, lower is better; paired t over the "
             f"{s['seeds']} seeds, Holm-adjusted over the page's {len(verdicts)} comparisons):", ""]
    lines += [f"- **{title}:** " + "; ".join(v.reading for v in found) + "." for title, found in groups.items()
              if found]
    return "\n".join(lines)


def render_budget(results: dict) -> str:
    epochs = results["settings"]["epochs"]
    rows = []
    for model in results["settings"]["models"]:
        runs = [r for r in results["runs"] if r["model"] == model]
        rows.append([f"`{model}`", last_epochs([r["best_epoch"] == epochs - 1 for r in runs]),
                     span([r["best_epoch"] + 1 for r in runs], "{:d}"),
                     f"{sum(r['seconds'] for r in runs) / len(runs):.0f}"])
    return "\n".join([
        f"Runs whose best validation epoch was the last of the {epochs} (`results.json`, `runs[].best_epoch`; "
        "*under-trained* where most of a model's runs are), the best epochs' range counted from 1, and a run's mean "
        "wall seconds (training and scoring):", "",
        table(["model", "best epoch last", "best epoch", "seconds per run"], rows, align="lrrr")])


def render() -> dict[str, str]:
    results, frame = run_files(FOLDER)
    verdicts = Verdicts(comparisons(results, frame))
    return {"run": render_run(results), "table": render_table(results, frame),
            "findings": render_findings(results, verdicts), "verdicts": verdicts.block(),
            "budget": render_budget(results)}


PAGE = Page("docs/operator.md", render, readings=True)
