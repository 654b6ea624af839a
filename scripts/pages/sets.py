"""docs/sets.md's numbers, rendered from the committed result files in docs/sets/ (``poolkit bench sets``).
"""

from __future__ import annotations

import csv

from rendering import ROOT, Page, read_json, table

FOLDER = ROOT / "docs" / "sets"


def number(value: float) -> str:
    """4 significant digits, scientific below 1e-3."""
    return f"{value:.4f}" if abs(value) >= 1e-3 or value == 0 else f"{value:.1e}"


def load() -> tuple[dict, list[dict]]:
    """(results.json, the rows of results.csv with numbers parsed)."""
    with open(FOLDER / "results.csv", newline="") as f:
        rows = [{**row, "depth": int(row["depth"]), "params": int(row["params"]), "mse_mean": float(row["mse_mean"]),
                 "mse_std": float(row["mse_std"]), "seeds": int(row["seeds"])} for row in csv.DictReader(f)]
    return read_json(FOLDER / "results.json"), rows


def cell(rows: list[dict], task: str, model: str, target: str = "all") -> dict:
    return next(r for r in rows if (r["task"], r["model"], r["target"]) == (task, model, target))


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


def render_table(results: dict, rows: list[dict]) -> str:
    seeds = results["settings"]["seeds"]
    lines = [f"Test MSE on standardised targets (1 = predicting the training mean), mean ± sample std over {seeds} "
             "seeds (`docs/sets/results.csv`); depth = attention layers, the pooler's included.", ""]
    for task in results["settings"]["tasks"]:
        targets = list(dict.fromkeys(r["target"] for r in rows if r["task"] == task and r["target"] != "all"))
        per_target = task == "statistics"
        head = ["model", "depth", "parameters", "test MSE", *([f"MSE {t}" for t in targets] if per_target else [])]
        body = []
        for model in results["settings"]["models"]:
            row = cell(rows, task, model)
            shown = [f"`{model}`", str(row["depth"]), f"{row['params']:,}",
                     f"{number(row['mse_mean'])} ± {number(row['mse_std'])}"]
            if per_target:
                shown += [number(cell(rows, task, model, t)["mse_mean"]) for t in targets]
            body.append(shown)
        lines += [f"**{task}**", "", table(head, body, align="l" + "r" * (len(head) - 1)), ""]
    return "\n".join(lines)


def render_claims(results: dict, rows: list[dict]) -> str:
    """The comparisons the issue asks for, each computed from the files."""
    out = []
    for task in results["settings"]["tasks"]:
        zonotope = cell(rows, task, "zonotope x1")
        attention = [cell(rows, task, m) for m in results["settings"]["models"] if m.startswith("attention")]
        single = next(r for r in attention if r["depth"] == 1)
        best = min(attention, key=lambda r: r["mse_mean"])
        out.append(f"- **{task}:** one zonotope layer {number(zonotope['mse_mean'])} ({zonotope['params']:,} "
                   f"parameters); one attention layer {number(single['mse_mean'])} ({single['params']:,}), "
                   f"{single['mse_mean'] / zonotope['mse_mean']:.1f}x the zonotope's MSE; the best of the attention "
                   f"models, `{best['model']}`, {number(best['mse_mean'])} ({best['params']:,}), "
                   f"{best['mse_mean'] / zonotope['mse_mean']:.1f}x the zonotope's MSE.")
    runs = results["runs"]
    last = sum(r["best_epoch"] == results["settings"]["epochs"] - 1 for r in runs)
    out.append(f"- **Training budget:** the best validation epoch was the last one in {last} of the {len(runs)} runs "
               "(`results.json`, `runs[].best_epoch`): those models were still improving when the budget ran out.")
    return "\n".join(out)


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
    return "\n".join([*lines, table(["pooler", "grid", "slope, weighted", f"error at n = {largest}, weighted",
                                     "slope, unweighted", f"error at n = {largest}, unweighted"], body, align="llrrrr")])


def render() -> dict[str, str]:
    results, rows = load()
    return {"run": render_run(results), "table": render_table(results, rows), "claims": render_claims(results, rows),
            "quadrature": render_quadrature(results)}


PAGE = Page("docs/sets.md", render)
