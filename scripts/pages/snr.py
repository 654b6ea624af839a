"""docs/snr.md's numbers, rendered from the committed result files in docs/snr/.

Sources: ``baselines.json`` (``scripts/snr_baselines.py``); ``sweep/results.csv`` and ``sweep/results.json`` (the
committed ``poolkit bench snr-sweep`` run and its ``--extend`` runs, listed under ``extensions``);
``sweep-lr-4x/results.json`` (the learning-rate stage again, at the largest extended budget);
``quick-vector0/results.csv`` and ``results.json`` (the earlier ``poolkit bench snr --quick`` run, whose pooler
``cls`` read the type-marked vector 0: it is shown as ``vector0``).
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

from rendering import ROOT, Page, read_json, span, table

from poolkit_bench.snr import FULL, QUICK

FOLDER = ROOT / "docs" / "snr"
SWEEP = FOLDER / "sweep"
BEFORE = FOLDER / "quick-vector0"
LR_CHECK = FOLDER / "sweep-lr-4x"
#: The earlier quick run named the vector-0 reader ``cls``; it is ``vector0`` now (``cls`` is the paper's token).
BEFORE_NAMES = {"cls": "vector0"}
BASELINES = ("baseline_mean", "baseline_x0")
LOW_SNR = (4, 32)  # the paper's claims are about SNR 0.03-0.25: K = 4 ... 32 of N = 128
ORDER_OF_MAGNITUDE = 10.0  # the paper: adaptive pooling's error about an order of magnitude below the others'
PAPER_STD_RATIO = 0.5  # the paper: adaptive pooling's seed variance "over 50%" below the others'


def snr(k: int, n: int) -> str:
    return f"{k / n:.4f}".rstrip("0").rstrip(".")


def mse(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if abs(value) >= 10 ** -digits else f"{value:.1e}"


def ks_text(ks: list[int], every: list[int]) -> str:
    """The K values in ``ks`` as text ("every K" when they are all of ``every``)."""
    return "every K" if ks == every else "no K" if not ks else "K = " + ", ".join(str(k) for k in ks)


# -- the blocks ---------------------------------------------------------------------------------------
def load_before() -> tuple[dict, dict]:
    """(results.json, {pooler: {K: (mean, std)}}) of the earlier quick run, its ``cls`` renamed ``vector0``."""
    cells: dict[str, dict[int, tuple[float, float]]] = {}
    with open(BEFORE / "results.csv", newline="") as f:
        for row in csv.DictReader(f):
            name = BEFORE_NAMES.get(row["pooler"], row["pooler"])
            cells.setdefault(name, {})[int(row["K"])] = (float(row["mse_mean"]), float(row["mse_std"]))
    results = read_json(BEFORE / "results.json")
    results["settings"]["poolers"] = [BEFORE_NAMES.get(p, p) for p in results["settings"]["poolers"]]
    return results, cells


class Sweep:
    """The committed sweep: its settings and runs (results.json) and its cells (results.csv)."""

    def __init__(self, meta: dict, rows: list[dict]) -> None:
        self.meta, self.settings, self.runs = meta, meta["settings"], meta["runs"]
        self.budgets = [tuple(b) for b in self.settings["budgets"]]
        self.largest = max(self.budgets, key=lambda b: b[0] * b[1])
        self.reference = self.budgets[self.settings["reference"]]
        self.quick = meta["quick_budget"][0] * meta["quick_budget"][1]
        self.poolers, self.ks = self.settings["poolers"], self.settings["ks"]
        self.layers = self.settings["base"]["layers"]
        self.cells = {(r["stage"], int(r["samples"]), int(r["epochs"]), int(r["layers"]), r["pooler"], int(r["K"])): r
                      for r in rows if r["stage"] != "lr"}
        self.extensions = meta.get("extensions", [])
        self.added = {(tuple(b), p) for e in self.extensions for b in e["budgets"] for p in e["poolers"]}
        self.added_poolers = [p for p in self.poolers if any(p == q for _, q in self.added)]
        self.all_budgets = sorted({*self.budgets, *(b for b, _ in self.added)}, key=lambda b: b[0] * b[1])

    def has(self, pooler: str, budget: tuple[int, int]) -> bool:
        return ("budget", *budget, self.layers, pooler, self.ks[0]) in self.cells

    def top(self, pooler: str) -> tuple[int, int]:
        """The largest budget with cells of both ``pooler`` and adapool."""
        return max((b for b in self.all_budgets if self.has(pooler, b) and self.has("adapool", b)),
                   key=lambda b: b[0] * b[1])

    def is_added(self, run: dict) -> bool:
        """Whether ``run`` came from an ``--extend`` run."""
        return run["stage"] == "budget" and ((run["samples"], run["epochs"]), run["pooler"]) in self.added

    @classmethod
    def load(cls, folder: Path = SWEEP) -> Sweep:
        with open(folder / "results.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        return cls(read_json(folder / "results.json"), rows)

    def cell(self, pooler: str, k: int, budget: tuple[int, int] | None = None, layers: int | None = None) -> dict:
        """One pooler's cell (mean, std, seeds, ... as floats) at ``budget`` (default: the largest) and ``layers``."""
        samples, epochs = budget or self.largest
        layers = self.layers if layers is None else layers
        if pooler in BASELINES:
            key = ("baseline", samples, epochs, 0, pooler, k)
        else:
            stage = "budget" if layers == self.layers else "depth"
            key = (stage, samples, epochs, layers, pooler, k)
        row = self.cells[key]
        return {name: float(row[name]) for name in ("mse_mean", "mse_std", "seeds", "best_last", "cpu_seconds",
                                                    "lr", "budget_x")}

    def mse(self, pooler: str, k: int, budget=None, layers=None) -> float:
        return self.cell(pooler, k, budget, layers)["mse_mean"]

    def ratio(self, pooler: str, k: int, budget=None, layers=None) -> float:
        """``pooler``'s test MSE over adapool's (above 1: adapool has the lower error)."""
        return self.mse(pooler, k, budget, layers) / self.mse("adapool", k, budget, layers)

    def times(self, budget: tuple[int, int]) -> str:
        x = budget[0] * budget[1] / self.quick
        return f"{x:g}" if x >= 1 else f"1/{1 / x:g}"

    def low_ks(self) -> list[int]:
        return [k for k in self.ks if LOW_SNR[0] <= k <= LOW_SNR[1]]

    def stage_runs(self, stage: str, budget=None) -> list[dict]:
        return [r for r in self.runs
                if r["stage"] == stage and (budget is None or (r["samples"], r["epochs"]) == budget)]


def budget_name(sweep: Sweep, budget: tuple[int, int]) -> str:
    return f"{budget[0]:,} × {budget[1]} ({sweep.times(budget)}×)"


def render_sweep_settings(sweep: Sweep) -> str:
    s, base = sweep.settings, sweep.settings["base"]
    lines = [f"The committed run is `poolkit bench snr-sweep` with its defaults (`poolkit_bench.CPU_SWEEP`; "
             f"`docs/snr/sweep/results.json`): poolers {', '.join(sweep.poolers)}; K = "
             f"{', '.join(map(str, sweep.ks))} of N = {base['num_vectors']} (SNR "
             f"{', '.join(snr(k, base['num_vectors']) for k in sweep.ks)}); an encoder of {base['layers']} layer(s), "
             f"{base['heads']} head(s), width {base['dim']}, FF {base['ff']}; batch {base['batch_size']}; "
             f"{base['folds']} folds; {s['seeds']} runs per cell, {s['largest_seeds']} at the largest budget. Budgets "
             f"are samples × epochs, also given as multiples of `--quick`'s "
             f"{sweep.meta['quick_budget'][0]:,} × {sweep.meta['quick_budget'][1]}. CPU seconds are the runs' own "
             "(`runs[].cpu_seconds`, training and validation of every epoch and the test):", ""]
    groups: dict[tuple, list[float]] = {}
    for r in sweep.runs:
        groups.setdefault((r["stage"], r["samples"], r["epochs"], r["layers"]), []).append(r["cpu_seconds"])
    order = {"lr": 0, "budget": 1, "depth": 2}
    ordered = sorted(groups.items(), key=lambda g: (order[g[0][0]], g[0][1] * g[0][2], g[0][3]))
    lines.append(table(["stage", "budget", "layers", "runs", "CPU-s, all runs", "CPU-s per run (median)"],
                       [[stage, budget_name(sweep, (samples, epochs)), layers, len(cpu), f"{sum(cpu):,.0f}",
                         f"{statistics.median(cpu):.1f}"] for (stage, samples, epochs, layers), cpu in ordered],
                       align="llrrrr"))
    own = [r["cpu_seconds"] for r in sweep.runs if not sweep.is_added(r)]
    lines += ["", f"The sweep's own {len(own)} runs used {sum(own):,.0f} CPU-seconds; the command took "
              f"{sweep.meta['runtime_seconds'] / 60:.1f} minutes of wall time with {base['workers']} worker processes "
              f"of {base['threads']} torch thread each ({sweep.meta['provenance']['cores']} cores, "
              f"`provenance` in the file)."]
    return "\n".join(lines)


def render_lr(sweep: Sweep) -> str:
    s = sweep.settings
    lrs = [str(lr) for lr in s["lrs"]]
    lines = [f"Each pooler trained once per rate (run 0, K = {s['lr_k']}, budget "
             f"{budget_name(sweep, sweep.reference)}); "
             "its rate is the one with the lowest best-epoch MSE on fold 0's validation rows (`lr_choice` in "
             "`results.json`), and every later run of that pooler uses it. The test rows play no part.", ""]
    choices = [sweep.meta["lr_choice"][pooler] for pooler in sweep.poolers]
    rows = [[pooler, *(mse(choice["val_mse"][lr]) for lr in lrs), f"{choice['lr']:g}"]
            for pooler, choice in zip(sweep.poolers, choices)]
    header = ["pooler", *(f"val MSE at lr {lr:g}" for lr in s["lrs"]), "chosen"]
    return "\n".join([*lines, table(header, rows, align="l" + "r" * (len(header) - 1))])


def render_budget_results(sweep: Sweep) -> str:
    columns = [*sweep.poolers, *BASELINES]
    lines = ["Test MSE, mean ± sample std over the runs of each cell (`docs/snr/sweep/results.csv`, stage `budget`); "
             "the baselines are analytic, on each budget's own test rows (the last 10% of its samples).", ""]
    rows = []
    for budget in sorted(sweep.budgets, key=lambda b: b[0] * b[1]):
        for k in sweep.ks:
            cells = [sweep.cell(name, k, budget) for name in columns]
            rows.append([budget_name(sweep, budget), k, *(mse(c["mse_mean"]) + ("" if name in BASELINES else
                                                                                f" ± {mse(c['mse_std'])}")
                                                          for name, c in zip(columns, cells))])
    return "\n".join([*lines, table(["budget", "K", *columns], rows, align="l" + "r" * (len(columns) + 1))])


def render_ratios(sweep: Sweep) -> str:
    others = [p for p in sweep.poolers if p != "adapool"]
    lines = ["Each pooler's test MSE over adapool's, at K = " + " / ".join(map(str, sweep.ks)) + " (above 1: adapool "
             "is better):", ""]
    rows = [[budget_name(sweep, budget), *(" / ".join(f"{sweep.ratio(p, k, budget):.2f}" for k in sweep.ks)
                                          for p in others)]
            for budget in sorted(sweep.budgets, key=lambda b: b[0] * b[1])]
    return "\n".join([*lines, table(["budget", *others], rows, align="l" + "r" * len(others))])


def render_extension(sweep: Sweep) -> str:
    """Each ``--extend`` run (its command, commit, cost and reproduction check), then mean / adapool and the other
    extended poolers' ratios, best-epoch-last counts and CPU seconds at every budget."""
    if not sweep.extensions:
        return "The committed sweep has not been extended."
    lines = []
    for e in sweep.extensions:
        r = e["reproduced"]
        runs = sum(1 for run in sweep.runs if run.get("commit") == e["provenance"]["commit"] and sweep.is_added(run)
                   and [run["samples"], run["epochs"]] in e["budgets"] and run["pooler"] in e["poolers"])
        lines.append(f"- `poolkit bench snr-sweep --extend docs/snr/sweep --budgets "
                     f"{' '.join(f'{b[0]}x{b[1]}' for b in e['budgets'])} --poolers {' '.join(e['poolers'])}` at "
                     f"commit `{e['provenance']['commit'][:7]}`: {runs} runs at lr "
                     + ", ".join(f"{p} {lr:g}" for p, lr in e["lrs"].items())
                     + f" (the sweep's own choice), {e['cpu_seconds']:,.0f} CPU-seconds, "
                     f"{e['runtime_seconds'] / 60:.1f} minutes of wall time. Its check re-ran {r['pooler']} at "
                     f"K = {r['K']}, seed {r['seed']}, {budget_name(sweep, (r['samples'], r['epochs']))}: test MSE "
                     f"{r['then']['test_mse']:.6g} in the sweep, {r['now']['test_mse']:.6g} here, every epoch's loss "
                     + ("the same." if r["then"] == r["now"] else "NOT the same."))
    others = [p for p in sweep.added_poolers if p != "adapool"]
    shown = sweep.added_poolers
    lines += ["", "At every budget, for the extended poolers: each one's test MSE over adapool's at K = "
              + " / ".join(map(str, sweep.ks)) + "; the runs whose best validation epoch was the last, over all K; "
              "and the CPU seconds of these poolers' runs at that budget (`results.csv`: `mse_mean`, `best_last`, "
              "`seeds`, `cpu_seconds`):", ""]
    header = ["budget", *(f"{p} / adapool" for p in others), *(f"best epoch last: {p}" for p in shown),
              "CPU-s per run (median)", "CPU-s, all"]
    rows = []
    for budget in sweep.all_budgets:
        ratios = [" / ".join(f"{sweep.ratio(p, k, budget):.2f}" for k in sweep.ks) if sweep.has(p, budget)
                  and sweep.has("adapool", budget) else "" for p in others]
        last = []
        for p in shown:
            cells = [sweep.cell(p, k, budget) for k in sweep.ks] if sweep.has(p, budget) else []
            last.append(f"{sum(c['best_last'] for c in cells):.0f} of {sum(c['seeds'] for c in cells):.0f}"
                        if cells else "")
        cpu = [r["cpu_seconds"] for r in sweep.stage_runs("budget", budget) if r["pooler"] in shown]
        rows.append([budget_name(sweep, budget), *ratios, *last, f"{statistics.median(cpu):.1f}", f"{sum(cpu):,.0f}"])
    lines.append(table(header, rows, align="l" + "r" * (len(header) - 1)))
    if (LR_CHECK / "results.json").is_file():
        lines += ["", render_lr_check(sweep, read_json(LR_CHECK / "results.json"))]
    return "\n".join(lines)


def render_lr_check(sweep: Sweep, check: dict) -> str:
    """Whether the rate choice of stage 1, made again at a larger budget, picks the rates the extension used."""
    s, choice = check["settings"], check["lr_choice"]
    budget = tuple(s["budgets"][s["reference"]])
    used = {p: lr for e in sweep.extensions for p, lr in e["lrs"].items()}
    changed = [p for p in choice if p in used and choice[p]["lr"] != used[p]]
    return (f"The extension kept the rates chosen at {budget_name(sweep, sweep.reference)}. A separate run "
            f"(`docs/snr/sweep-lr-4x/`, commit `{check['provenance']['commit'][:7]}`: the rate stage and one run "
            f"per pooler, `--budgets {budget[0]}x{budget[1]} --poolers {' '.join(choice)} --ks {s['lr_k']} --lrs "
            f"{' '.join(f'{lr:g}' for lr in s['lrs'])} --seeds 1 --largest-seeds 1 --depths`) chose again at "
            f"{budget_name(sweep, budget)} on fold 0's validation rows at K = {s['lr_k']}: "
            + "; ".join(f"{p} {c['lr']:g} (val MSE " + ", ".join(f"{float(lr):g}: {mse(v)}" for lr, v in
                                                                c["val_mse"].items()) + ")" for p, c in choice.items())
            + ". Its one run per pooler at those rates (K = " + str(s["lr_k"]) + ", `results.csv`, stage budget) "
            "has test MSE " + ", ".join(f"{r['pooler']} {mse(r['test_mse'])}" for r in check["runs"]
                                        if r["stage"] == "budget")
            + ". " + ("It picks the rates the extension used for every pooler." if not changed else
                      f"It picks another rate for {', '.join(changed)}: the extension's numbers for "
                      f"{'it' if len(changed) == 1 else 'them'} are at a rate that this budget's validation rows "
                      "do not prefer."))


def render_depth(sweep: Sweep) -> str:
    s = sweep.settings
    k, poolers = s["depth_k"], s["depth_poolers"]
    depths = sorted({sweep.layers, *s["depths"]})
    lines = [f"At budget {budget_name(sweep, sweep.reference)} and K = {k}, test MSE (mean ± std over "
             f"{s['seeds']} runs) by encoder depth; the {sweep.layers}-layer row is the budget stage's. Only "
             f"{', '.join(poolers)} and one K, to fit the CPU time.", ""]
    rows = []
    for layers in depths:
        cells = [sweep.cell(p, k, sweep.reference, layers) for p in poolers]
        stage = "budget" if layers == sweep.layers else "depth"
        cpu = [r["cpu_seconds"] for r in sweep.stage_runs(stage, sweep.reference) if r["layers"] == layers]
        ratio = f"{sweep.ratio('mean', k, sweep.reference, layers):.2f}" if {"mean", "adapool"} <= set(poolers) else ""
        rows.append([layers, *(f"{mse(c['mse_mean'])} ± {mse(c['mse_std'])}" for c in cells), ratio,
                     f"{statistics.median(cpu):.1f}"])
    header = ["layers", *poolers, "mean / adapool", "CPU-s per run (median)"]
    return "\n".join([*lines, table(header, rows, align="r" * len(header))])


def std_ratios(sweep: Sweep) -> dict[str, list[float]]:
    """adapool's std over each other pooler's, per K, at the largest budget."""
    return {p: [sweep.cell("adapool", k)["mse_std"] / sweep.cell(p, k)["mse_std"] for k in sweep.ks]
            for p in sweep.poolers if p != "adapool"}


def render_variance(sweep: Sweep) -> str:
    seeds = int(sweep.cell("adapool", sweep.ks[0])["seeds"])
    lines = [f"At the largest budget ({budget_name(sweep, sweep.largest)}), the sample std of the test MSE over "
             f"{seeds} runs (each with its own seed and validation fold), and adapool's std over each other pooler's:",
             ""]
    ratios = std_ratios(sweep)
    header = ["K", *(f"std {p}" for p in sweep.poolers), *(f"adapool / {p}" for p in ratios)]
    rows = [[k, *(mse(sweep.cell(p, k)["mse_std"]) for p in sweep.poolers), *(f"{r[i]:.2f}" for r in ratios.values())]
            for i, k in enumerate(sweep.ks)]
    return "\n".join([*lines, table(header, rows, align="r" * len(header))])


def render_baselines(base: dict) -> dict[str, str]:
    got, pub, n = base["measured"], base["published"], base["settings"]["num_vectors"]
    lines = [f"Ours: {base['settings']['samples']:,} samples, data seed {base['settings']['data_seed']} "
             f"(`docs/snr/baselines.json`, made by `scripts/snr_baselines.py`); published: the paper's code, "
             "the last 10% of its 1M samples.", ""]
    diffs, rows = [], []
    for k in got["baseline_mean"]:
        row = [k, snr(int(k), n)]
        for name in BASELINES:
            diffs.append(got[name][k] / pub[name][k] - 1)
            row += [mse(got[name][k], 5), mse(pub[name][k], 5), f"{diffs[-1]:+.1%}"]
        rows.append(row)
    lines.append(table(["K", "SNR", "mean-of-all (ours)", "published", "diff", "vector 0 (ours)", "published", "diff"],
                       rows, align="r" * 8))
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
    return (f"The earlier quick run (`docs/snr/quick-vector0/results.json`: `runtime_seconds`, each run's "
            f"`cpu_seconds`) is "
            f"{len(s['poolers'])} poolers × {len(s['ks'])} K × {s['seeds']} seeds = {len(runs)} runs of "
            f"{s['epochs']} epochs. Its runs used {sum(cpu):.0f} CPU-seconds in all "
            f"(median {statistics.median(cpu):.1f} "
            f"per run, {statistics.median(cpu) / s['epochs']:.2f} per epoch including validation), and the whole "
            f"command took {results['runtime_seconds'] / 60:.0f} minutes of wall time with {s['workers']} workers of "
            f"{s['threads']} torch thread each on a machine that other jobs shared (`platform` and `torch` in the "
            "file).")


def render_settings(full, quick) -> str:
    """The two presets side by side (``poolkit_bench.FULL`` / ``QUICK``)."""
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
    return "\n".join(["Rendered from `poolkit_bench.FULL` and `QUICK`:", "",
                      table(["setting", "`--full` (the paper)", "`--quick`"],
                            [list(row) for row in zip(names, column(full), column(quick))])])


def render_full(full) -> str:
    runs = len(full.poolers) * len(full.ks) * full.seeds
    train = full.num_samples * (1 - full.test_ratio) * (1 - 1 / full.folds)
    gigabytes = full.num_samples * full.num_vectors * full.dim * 4 / 1e9
    return (f"`--full` matches the paper (`poolkit_bench.FULL`): {runs} runs of {full.epochs} epochs over "
            f"{train / 1000:.0f}k training samples each. It holds the {full.num_samples:,} × {full.num_vectors} × "
            f"{full.dim} inputs ({gigabytes:.1f} GB as float32) on the device.")


def render_results(results: dict, cells: dict) -> str:
    s = results["settings"]
    columns = [*s["poolers"], *BASELINES]
    test = int(s["num_samples"] * s["test_ratio"])
    lines = [f"Test MSE of the earlier quick run (`docs/snr/quick-vector0/results.csv`; settings and every run in "
             f"`results.json`; made before the paper's CLS token existed here), with its `cls` shown as `vector0`: "
             "each "
             f"pooler cell is the mean ± sample std over {s['seeds']} seeds; the baselines are analytic, on the same "
             f"{test} test samples.", ""]
    rows = [[k, snr(k, s["num_vectors"]), *(mse(cells[name][k][0]) + ("" if name in BASELINES else
                                                                      f" ± {mse(cells[name][k][1])}")
                                           for name in columns)] for k in s["ks"]]
    return "\n".join([*lines, table(["K", "SNR", *columns], rows, align="r" * (len(columns) + 2))])


def verdict(reproduced: bool, partly: bool) -> str:
    return "reproduced" if reproduced else "partly reproduced" if partly else "not reproduced"


def claim_gap(sweep: Sweep) -> str:
    """The paper: adaptive pooling's error about 10x below mean, max and CLS pooling at SNR 0.03-0.25."""
    low = sweep.low_ks()
    tops = {p: sweep.top(p) for p in ("mean", "max", "cls") if p in sweep.poolers}
    gaps = {p: [sweep.ratio(p, k, top) for k in low] for p, top in tops.items()}
    lowest = min(min(g) for g in gaps.values())
    losing = {p: [str(k) for k, g in zip(low, gaps[p]) if g <= 1] for p in gaps}
    if lowest >= ORDER_OF_MAGNITUDE:
        why = ""
    elif lowest > 1:
        why = "; adapool has the lowest MSE of these at every such K, but by less than 10x"
    else:
        why = "; " + "; ".join(f"{p} is as good or better at K = {', '.join(ks)}" for p, ks in losing.items() if ks)
    return (f"- **Adaptive pooling's error about an order of magnitude below mean, max and CLS pooling at SNR "
            f"0.03-0.25: {verdict(lowest >= ORDER_OF_MAGNITUDE, lowest > 1)}.** Each at the largest budget it was "
            f"run at, over K = {', '.join(map(str, low))}: "
            + ", ".join(f"{p} / adapool {span(g, unit='x')} ({sweep.times(tops[p])}×)" for p, g in gaps.items())
            + why + ".")


def claim_trend(sweep: Sweep) -> str:
    """Whether mean / adapool grows with the budget, per K in the paper's SNR range."""
    budgets = [b for b in sweep.all_budgets if sweep.has("mean", b) and sweep.has("adapool", b)]
    steps = []
    for k in sweep.low_ks():
        trend = [sweep.ratio("mean", k, b) for b in budgets]
        rising = "rising at every step" if all(b > a for a, b in zip(trend, trend[1:])) else "not rising at every step"
        best = budgets[trend.index(max(trend))]
        steps.append(f"at K = {k} " + " → ".join(f"{r:.2f}" for r in trend) + f" ({rising}; steps "
                     + ", ".join(f"{b / a - 1:+.0%}" for a, b in zip(trend, trend[1:]))
                     + f"; highest at {sweep.times(best)}×)")
    return (f"- **Does mean / adapool grow with the budget?** Over budgets "
            f"{', '.join(sweep.times(b) + '×' for b in budgets)} of quick mode: " + "; ".join(steps) + ".")


def claim_variance(sweep: Sweep) -> str:
    """The paper: adaptive pooling's variance across seeds over 50% below the others'."""
    ratios = std_ratios(sweep)
    paper = {p: r for p, r in ratios.items() if p in ("mean", "max", "cls")}
    pairs = [x for r in paper.values() for x in r]
    below = [p for p, r in paper.items() if statistics.median(r) < 1]
    reproduced = all(x < PAPER_STD_RATIO for x in pairs)
    return (f"- **Adaptive pooling's seed variance over 50% below that of mean, max and CLS pooling: "
            f"{verdict(reproduced, bool(below))}.** At {budget_name(sweep, sweep.largest)}, adapool's std over each "
            f"other pooler's, over K = {', '.join(map(str, sweep.ks))}: "
            + ", ".join(f"{p} {span(r)}" for p, r in ratios.items())
            + f". Against {', '.join(paper)} it is below {PAPER_STD_RATIO:g} (the std reading of the claim; the "
            f"variance reading needs below {math.sqrt(PAPER_STD_RATIO):.2f}) in "
            f"{sum(x < PAPER_STD_RATIO for x in pairs)} of {len(pairs)} (pooler, K) pairs, and its median over K is "
            "below 1 against "
            + (", ".join(below) or "none of them") + ".")


def claim_cls(sweep: Sweep, before: tuple[dict, dict]) -> str:
    """The paper's CLS against adapool, and against the earlier run's type-marked vector 0 at the same budget."""
    tops = [b for b in sweep.all_budgets if sweep.has("cls", b) and sweep.has("adapool", b)
            and b in (sweep.largest, sweep.top("cls"))]
    text = ("- **The paper's CLS:** cls / adapool " + "; ".join(
        f"at {budget_name(sweep, b)} " + ", ".join(f"{sweep.ratio('cls', k, b):.2f} at K = {k}" for k in sweep.ks)
        for b in tops) + ".")
    old = before[1].get("vector0", {})
    ks = [k for k in sweep.ks if k in old]
    if ks and (before[0]["settings"]["num_samples"], before[0]["settings"]["epochs"]) in sweep.budgets:
        budget = (before[0]["settings"]["num_samples"], before[0]["settings"]["epochs"])
        text += (f" At {budget_name(sweep, budget)} the earlier quick run's vector0 (then called cls; lr "
                 f"{before[0]['settings']['lr']:g}) had " + ", ".join(f"{mse(old[k][0])} at K = {k}" for k in ks)
                 + "; the paper's cls here has " + ", ".join(mse(sweep.mse("cls", k, budget)) for k in ks)
                 + f" (lr {sweep.cell('cls', ks[0], budget)['lr']:g}).")
    return text


def claim_depth(sweep: Sweep) -> str:
    k, ref = sweep.settings["depth_k"], sweep.reference
    depths = sorted({sweep.layers, *sweep.settings["depths"]})
    return (f"- **Depth** (K = {k}, {budget_name(sweep, ref)}): mean / adapool is "
            + ", ".join(f"{sweep.ratio('mean', k, ref, d):.2f} with {d} layer(s)" for d in depths) + ".")


def claim_budget(sweep: Sweep) -> str:
    last = {p: [r["best_epoch"] == len(r["val_loss"]) - 1 for r in sweep.stage_runs("budget", sweep.largest)
                if r["pooler"] == p] for p in sweep.poolers}
    text = (f"- **Training budget:** at {budget_name(sweep, sweep.largest)} the best epoch was the last one in "
            f"{sum(map(sum, last.values()))} of {sum(map(len, last.values()))} runs ("
            + ", ".join(f"{p} {sum(v)} of {len(v)}" for p, v in last.items()) + ")")
    for budget in (b for b in sweep.all_budgets if b[0] * b[1] > sweep.largest[0] * sweep.largest[1]):
        last = {p: [r["best_epoch"] == len(r["val_loss"]) - 1 for r in sweep.stage_runs("budget", budget)
                    if r["pooler"] == p] for p in sweep.poolers if sweep.has(p, budget)}
        text += f"; at {budget_name(sweep, budget)} in " + ", ".join(f"{p} {sum(v)} of {len(v)}"
                                                                     for p, v in last.items())
    return text + "."


def claim_baselines(sweep: Sweep) -> str:
    ada = {k: sweep.mse("adapool", k) for k in sweep.ks}
    beat = [k for k in sweep.ks if ada[k] < min(sweep.mse(b, k) for b in BASELINES)]
    worse_x0 = [k for k in sweep.ks if ada[k] > sweep.mse("baseline_x0", k)]
    worse_mean = [k for k in sweep.ks if ada[k] > sweep.mse("baseline_mean", k)]
    return (f"- **Against the analytic baselines** at {budget_name(sweep, sweep.largest)}: adapool beats both at "
            f"{ks_text(beat, sweep.ks)}; it is worse than predicting vector 0 at {ks_text(worse_x0, sweep.ks)} and "
            f"worse than predicting the mean of all vectors at {ks_text(worse_mean, sweep.ks)}.")


def render_claims(sweep: Sweep, before: tuple[dict, dict]) -> str:
    """Each of the paper's claims with its verdict, and the sweep's findings, computed from the result files."""
    lines = [claim_gap(sweep), claim_trend(sweep), claim_variance(sweep)]
    if "cls" in sweep.poolers:
        lines.append(claim_cls(sweep, before))
    if {"mean", "adapool"} <= set(sweep.settings["depth_poolers"]) and sweep.settings["depths"]:
        lines.append(claim_depth(sweep))
    return "\n".join([*lines, claim_budget(sweep), claim_baselines(sweep)])


def render() -> dict[str, str]:
    base = read_json(FOLDER / "baselines.json")
    before = load_before()
    sweep = Sweep.load()
    return {**render_baselines(base), "runtime": render_runtime(before[0]), "full": render_full(FULL),
            "settings": render_settings(FULL, QUICK), "results": render_results(*before),
            "sweep-settings": render_sweep_settings(sweep), "lr": render_lr(sweep),
            "budget-results": render_budget_results(sweep), "ratios": render_ratios(sweep),
            "extension": render_extension(sweep),
            "depth": render_depth(sweep), "variance": render_variance(sweep), "claims": render_claims(sweep, before)}


PAGE = Page("docs/snr.md", render)
