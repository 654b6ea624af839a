"""docs/sets.md's numbers, rendered from the committed result files in docs/sets/ (``poolkit bench sets``), and its
readings, each from a declared test (:data:`COMPARED`, paired t over the seeds, Holm-adjusted over the page).
"""

from __future__ import annotations

from rendering import ROOT, Page, run_files, span, table
from verdicts import Comparison, Verdicts, last_epochs

FOLDER = ROOT / "docs" / "sets"
#: the page's comparisons, (a, b) on each task's test MSE: one zonotope layer against one and several attention
#: layers (the benchmark's question), against the Set Transformer and DeepSets at its parameter count (the paper's
#: baselines), two zonotope layers against two attention layers (the same depth), and what depth does for attention
COMPARED = (("zonotope x1", "attention x1"), ("zonotope x1", "attention x2"), ("zonotope x1", "attention x3"),
            ("zonotope x1", "set_transformer"), ("zonotope x1", "deepsets"), ("zonotope x2", "attention x2"),
            ("attention x3", "attention x1"))


def number(value: float) -> str:
    """4 significant digits, scientific below 1e-3."""
    return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"


def load() -> tuple[dict, list[dict], list[dict]]:
    """(results.json, the per-seed rows of results.csv, their summary per (task, model, target):
    ``poolkit_bench.sets.summarize``)."""
    from poolkit_bench.sets import summarize

    results, frame = run_files(FOLDER)
    return results, frame.to_dict("records"), summarize(frame).to_dict("records")


def cell(rows: list[dict], task: str, model: str, target: str = "all") -> dict:
    return next(r for r in rows if (r["task"], r["model"], r["target"]) == (task, model, target))


def tdof_cell(seed_rows: list[dict], task: str, model: str) -> str:
    """The range over seeds of the trained model's TDOF (results.csv, ``tdof``), '—' where no layer has value maps."""
    values = [r["tdof"] for r in seed_rows if (r["task"], r["model"], r["target"]) == (task, model, "all")]
    return "—" if any(v != v for v in values) else span([int(v) for v in values], "{:d}")


def runs_of(results: dict, task: str, model: str) -> list[dict]:
    """The runs of (task, model), in seed order: the pairing of every comparison."""
    return sorted((r for r in results["runs"] if (r["task"], r["model"]) == (task, model)), key=lambda r: r["seed"])


def comparisons(results: dict) -> list[Comparison]:
    """:data:`COMPARED` on each task of the run, test MSE per seed (lower is better), keyed 'task: a vs b'."""
    models = results["settings"]["models"]
    return [Comparison(f"{task}: {a} vs {b}", a, b, [r["test_mse"] for r in runs_of(results, task, a)],
                       [r["test_mse"] for r in runs_of(results, task, b)], f"{task} test MSE",
                       higher_is_better=False, scale=1.0, unit="", digits=4)
            for task in results["settings"]["tasks"] for a, b in COMPARED if a in models and b in models]


def render_run(results: dict) -> str:
    s, p = results["settings"], results["provenance"]
    # runs written since the benchmark harness record the load at the start and the end
    start = results["load_average_start_end"][0] if "load_average_start_end" in results else results[
        "load_average_at_start"]
    load_average = start[0]
    return (f"The committed run (`docs/sets/results.json`): commit `{p['commit']}`, {p['cpu']} ({p['cores']} cores, "
            f"load average {load_average:.1f} at the start: the machine was shared), torch {p['torch']}, "
            f"{s['threads']} torch thread(s); {len(results['runs'])} training runs and the quadrature study took "
            f"{results['runtime_seconds'] / 60:.1f} minutes. Sets of {s['min_size']}-{s['max_size']} elements, "
            f"{s['features']} features ({s['types']} types in `typed`"
            + (f", {s['pair_types']} in `pairs`" if "pairs" in s["tasks"] else "") + "); "
            f"{s['train']} training, {s['val']} validation "
            f"and {s['test']} test sets; width {s['width']}, K = {s['generators']} generators; Adam lr {s['lr']:g}, "
            f"batch {s['batch_size']}, {s['epochs']} epochs, the epoch with the lowest validation MSE scored on the "
            f"test sets; seeds {s['seed']}-{s['seed'] + s['seeds'] - 1}.")


def render_table(results: dict, seed_rows: list[dict], rows: list[dict]) -> str:
    seeds, sample = results["settings"]["seeds"], results["settings"]["tdof_sets"]
    lines = [f"Test MSE on standardised targets (1 = predicting the training mean), mean ± sample std over {seeds} "
             "seeds (`docs/sets/results.csv`, one row per seed); depth = attention layers, the pooler's included; "
             f"TDOF of the trained model (its largest over the layers with value maps, on {sample} test sets), its "
             "range over the seeds, '—' where no layer has value maps.", ""]
    for task in results["settings"]["tasks"]:
        targets = list(dict.fromkeys(r["target"] for r in rows if r["task"] == task and r["target"] != "all"))
        per_target = task == "statistics"
        head = ["model", "depth", "width", "parameters", "TDOF", "test MSE",
                *([f"MSE {t}" for t in targets] if per_target else [])]
        body = []
        for model in results["settings"]["models"]:
            row = cell(rows, task, model)
            shown = [f"`{model}`", str(row["depth"]), str(row["width"]), f"{row['params']:,}",
                     tdof_cell(seed_rows, task, model), f"{number(row['mse_mean'])} ± {number(row['mse_std'])}"]
            if per_target:
                shown += [number(cell(rows, task, model, t)["mse_mean"]) for t in targets]
            body.append(shown)
        lines += [f"**{task}**", "", table(head, body, align="l" + "r" * (len(head) - 1)), ""]
    return "\n".join(lines)


def render_findings(results: dict, verdicts: Verdicts) -> str:
    """Per task, the reading of each comparison on it."""
    out = []
    for task in results["settings"]["tasks"]:
        readings = "; ".join(v.reading for v in verdicts if v.comparison.key.startswith(f"{task}: "))
        out.append(f"- **{task}:** {readings}.")
    return "\n".join([f"Each reading from its test in the verdicts below (test MSE, lower is better; paired t over "
                      f"the {results['settings']['seeds']} seeds, Holm-adjusted over the page's "
                      f"{len(verdicts)} comparisons):", "", *out])


def render_budget(results: dict) -> str:
    """Per (task, model): how many runs had their best validation epoch at the last of the budget."""
    epochs, models = results["settings"]["epochs"], results["settings"]["models"]
    body = []
    for task in results["settings"]["tasks"]:
        cells = []
        for model in models:
            best = [r["best_epoch"] for r in runs_of(results, task, model)]
            last = [b == epochs - 1 for b in best]
            cells.append(f"{last_epochs(last)}; best "
                         f"{span([b + 1 for b in best], '{:d}')}")
        body.append([f"**{task}**", *cells])
    last = sum(r["best_epoch"] == epochs - 1 for r in results["runs"])
    return "\n".join([
        f"Runs whose best validation epoch was the last of the {epochs} (`results.json`, `runs[].best_epoch`; "
        "*under-trained* where most of a condition's runs are), then the best epochs' range, counted from 1; "
        f"{last} of the {len(results['runs'])} runs in all:", "",
        table(["task", *(f"`{m}`" for m in models)], body, align="l" + "r" * len(models))])


def render_quadrature(results: dict) -> str:
    from poolkit_bench.quadrature import GRIDS, convergence_rate

    rows = results["quadrature"]
    largest = max(r["n"] for r in rows)
    lines = [f"Slope of log error against log n (n = {min(r['n'] for r in rows)}-{largest}; the trapezoid rule's "
             "rate is -2) and the error at the largest n, with the trapezoid weights and without "
             "(`docs/sets/results.json`, `quadrature`):", ""]
    body = []
    for pooler in dict.fromkeys(r["pooler"] for r in rows):
        for grid in GRIDS:
            shown = [f"`{pooler}`", grid]
            for weighted in (True, False):
                final = next(r["error"] for r in rows if (r["pooler"], r["grid"], r["weighted"], r["n"])
                             == (pooler, grid, weighted, largest))
                shown += [f"{convergence_rate(rows, pooler, grid, weighted):.2f}", f"{final:.1e}"]
            body.append(shown)
    head = ["pooler", "grid", "slope, weighted", f"error at n = {largest}, weighted", "slope, unweighted",
            f"error at n = {largest}, unweighted"]
    return "\n".join([*lines, table(head, body, align="llrrrr")])


def page_verdicts(results: dict) -> Verdicts:
    """The page's one family: every task's comparisons, tested and Holm-adjusted together."""
    return Verdicts(comparisons(results))


def render() -> dict[str, str]:
    results, seed_rows, rows = load()
    verdicts = page_verdicts(results)
    return {"run": render_run(results), "table": render_table(results, seed_rows, rows),
            "findings": render_findings(results, verdicts), "verdicts": verdicts.block(),
            "budget": render_budget(results), "quadrature": render_quadrature(results)}


PAGE = Page("docs/sets.md", render, readings=True)
