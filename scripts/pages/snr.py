"""docs/snr.md's numbers, rendered from the committed result files in docs/snr/.

Sources: ``baselines.json`` (``scripts/snr_baselines.py``); ``sweep/results.csv`` and ``sweep/results.json`` (the
committed ``poolkit bench snr-sweep`` run and its ``--extend`` runs, listed under ``extensions``);
``sweep-lr-4x/results.json`` (the learning-rate stage again, at the largest extended budget);
``quick-vector0/results.csv`` and ``results.json`` (the earlier ``poolkit bench snr --quick`` run, whose pooler
``cls`` read the type-marked vector 0: it is shown as ``vector0``).

Every reading that compares two conditions is a declared test (``page_verdicts``), Holm-adjusted over the page:
test MSEs on log10 (differences in decades) and the spread of the runs on |ln MSE - its cell's mean|, both
paired by seed (one seed is one fold and one encoder initialisation, and at one budget one draw of the data).
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

from rendering import ROOT, Page, read_json, span, table
from verdicts import Comparison, Verdict, Verdicts

from poolkit_bench.snr_config import FULL, QUICK

FOLDER = ROOT / "docs" / "snr"
SWEEP = FOLDER / "sweep"
BEFORE = FOLDER / "quick-vector0"
LR_CHECK = FOLDER / "sweep-lr-4x"
#: The earlier quick run named the vector-0 reader ``cls``; it is ``vector0`` now (``cls`` is the paper's token).
BEFORE_NAMES = {"cls": "vector0"}
BASELINES = ("baseline_mean", "baseline_x0")
LOW_SNR = (4, 32)  # the paper's claims are about SNR 0.03-0.25: K = 4 ... 32 of N = 128
#: the paper: adaptive pooling's error "about an order of magnitude" below the others'. Read as: the ratio's adjusted
#: interval lies wholly above 10 ** 0.5 (about 3.2x, the midpoint of 1x and 10x on the log scale), so the gap is
#: surely nearer ten times than none
SIZE_FLOOR = 10 ** 0.5
PAPER_STD_RATIO = 0.5  # the paper: adaptive pooling's seed variance "over 50%" below the others'
PAPER_POOLERS = ("mean", "max", "cls")  # the poolers the paper's claims name


def snr(k: int, n: int) -> str:
    return f"{k / n:.4f}".rstrip("0").rstrip(".")


def mse(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if abs(value) >= 10 ** -digits else f"{value:.1e}"


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
    results["runs"] = [{**r, "pooler": BEFORE_NAMES.get(r["pooler"], r["pooler"])} for r in results["runs"]]
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
        self.all_budgets = sorted({*self.budgets, *(b for b, _ in self.added)}, key=lambda b: (b[0] * b[1], b[0]))
        self.quick_budget = tuple(meta["quick_budget"])

    def has(self, pooler: str, budget: tuple[int, int]) -> bool:
        return ("budget", *budget, self.layers, pooler, self.ks[0]) in self.cells

    def ks_at(self, budget: tuple[int, int], pooler: str = "adapool") -> list[int]:
        """The K values ``pooler`` ran at ``budget`` (an extension may run some of the sweep's)."""
        return [k for k in self.ks if ("budget", *budget, self.layers, pooler, k) in self.cells]

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

    def per_seed(self, pooler: str, k: int, budget=None, layers=None) -> dict[int, float]:
        """{seed: test MSE} of the runs of one cell (as :meth:`cell`; not a baseline)."""
        samples, epochs = budget or self.largest
        layers = self.layers if layers is None else layers
        stage = "budget" if layers == self.layers else "depth"
        return {r["seed"]: r["test_mse"] for r in self.stage_runs(stage, (samples, epochs))
                if r["pooler"] == pooler and r["K"] == k and r["layers"] == layers}

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
    lines = ["Each pooler's test MSE over adapool's, at K = " + " / ".join(map(str, sweep.ks)) + " (above 1: adapool's "
             "is the lower). Descriptive: the ratios the page reads are tested in the claims and the verdicts below.",
             ""]
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
                     f"{' '.join(f'{b[0]}x{b[1]}' for b in e['budgets'])} --poolers {' '.join(e['poolers'])}"
                     + (f" --ks {' '.join(map(str, e['ks']))}" if e.get("ks", sweep.ks) != sweep.ks else "")
                     + "` at "
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
              + " / ".join(map(str, sweep.ks)) + " ('–': not run at that K); the runs whose best validation epoch was "
              "the last, over the K run; "
              "and the CPU seconds of these poolers' runs at that budget (`results.csv`: `mse_mean`, `best_last`, "
              "`seeds`, `cpu_seconds`):", ""]
    header = ["budget", *(f"{p} / adapool" for p in others), *(f"best epoch last: {p}" for p in shown),
              "CPU-s per run (median)", "CPU-s, all"]
    rows = []
    for budget in sweep.all_budgets:
        ratios = [" / ".join(f"{sweep.ratio(p, k, budget):.2f}" if k in sweep.ks_at(budget, p) else "–"
                             for k in sweep.ks) if sweep.has(p, budget) and sweep.has("adapool", budget) else ""
                  for p in others]
        last = []
        for p in shown:
            cells = [sweep.cell(p, k, budget) for k in sweep.ks_at(budget, p)]
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


def cv(sweep: Sweep, pooler: str, k: int) -> float:
    """The coefficient of variation (sample std over mean) of one cell's test MSE at the largest budget."""
    cell = sweep.cell(pooler, k)
    return cell["mse_std"] / cell["mse_mean"]


def cv_ratios(sweep: Sweep) -> dict[str, list[float]]:
    """adapool's coefficient of variation over each other pooler's, per K, at the largest budget."""
    return {p: [cv(sweep, "adapool", k) / cv(sweep, p, k) for k in sweep.ks] for p in sweep.poolers if p != "adapool"}


def render_variance(sweep: Sweep) -> str:
    seeds = int(sweep.cell("adapool", sweep.ks[0])["seeds"])
    lines = [f"At the largest budget ({budget_name(sweep, sweep.largest)}), the coefficient of variation of the test "
             f"MSE over {seeds} runs (each with its own seed and validation fold): the sample std over the mean, in "
             "%, and adapool's over each other pooler's. Unlike a ratio of stds, it does not grow with a pooler's "
             "MSE (the stds are in the table of test MSE by budget).", ""]
    ratios = cv_ratios(sweep)
    header = ["K", *(f"CV {p} %" for p in sweep.poolers), *(f"adapool / {p}" for p in ratios)]
    rows = [[k, *(f"{100 * cv(sweep, p, k):.2f}" for p in sweep.poolers), *(f"{r[i]:.2f}" for r in ratios.values())]
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


# -- the readings -------------------------------------------------------------------------------------
def paired(a: dict[int, float], b: dict[int, float]) -> tuple[list[float], list[float]]:
    """The values of the seeds that ``a`` and ``b`` share, in seed order."""
    seeds = sorted(a.keys() & b.keys())
    return [a[s] for s in seeds], [b[s] for s in seeds]


def log10(values: dict[int, float]) -> dict[int, float]:
    return {seed: math.log10(value) for seed, value in values.items()}


def lower_mse(key: str, a: str, b: str, a_mse: dict[int, float], b_mse: dict[int, float], what: str) -> Comparison:
    """``a`` against ``b`` on log10 test MSE per seed, lower is better; differences in decades (-1: a tenth)."""
    return Comparison(key, a, b, *paired(log10(a_mse), log10(b_mse)), what, higher_is_better=False, scale=1.0,
                      unit="decades", digits=2)


def gap(sweep: Sweep, k: int, budget=None, layers=None) -> dict[int, float]:
    """log10(mean / adapool) per seed: by how many decades adapool's test MSE sits below mean pooling's."""
    mean = log10(sweep.per_seed("mean", k, budget, layers))
    ada = log10(sweep.per_seed("adapool", k, budget, layers))
    return {seed: mean[seed] - ada[seed] for seed in mean.keys() & ada.keys()}


def wider(key: str, a: str, b: str, a_gap: dict[int, float], b_gap: dict[int, float], k: int) -> Comparison:
    """The gap log10(mean / adapool) under condition ``a`` against ``b``, paired by seed (higher: wider)."""
    return Comparison(key, a, b, *paired(a_gap, b_gap), f"log10(mean / adapool), K = {k}", scale=1.0,
                      unit="decades", digits=2)


def spread(values: dict[int, float]) -> dict[int, float]:
    """|ln MSE - its mean over the runs| per seed: how far each run sits from its cell, scale-free."""
    logs = {seed: math.log(value) for seed, value in values.items()}
    centre = statistics.fmean(logs.values())
    return {seed: abs(value - centre) for seed, value in logs.items()}


def mse_key(a: str, b: str, budget: tuple[int, int], k: int) -> str:
    return f"{a} vs {b}, {budget[0]}x{budget[1]}, K = {k}"


def trend_key(k: int, low: tuple[int, int], high: tuple[int, int]) -> str:
    return f"gap at {high[0]}x{high[1]} vs {low[0]}x{low[1]}, K = {k}"


def depth_key(layers: int) -> str:
    return f"gap with {layers} layers"


def layers_name(layers: int) -> str:
    return f"{layers} layer{'' if layers == 1 else 's'}"


def spread_key(pooler: str, k: int) -> str:
    return f"spread adapool vs {pooler}, K = {k}"


def trend_paths(sweep: Sweep) -> dict[str, list[tuple[int, int]]]:
    """The budgets with runs of both mean and adapool, smallest first, on two paths that meet at quick mode's
    budget: ``epochs`` (the sweep's budgets and, above quick mode, more epochs on its samples) and ``samples``
    (quick mode's epochs on more samples); a path of one budget is left out."""
    both = [b for b in sweep.all_budgets if sweep.has("mean", b) and sweep.has("adapool", b)]
    samples, epochs = sweep.quick_budget
    more_data = [b for b in both if b[1] == epochs and b[0] >= samples]
    paths = {"epochs": [b for b in both if b not in more_data[1:]], "samples": more_data}
    return {name: path for name, path in paths.items() if len(path) > 1}


def trend_steps(sweep: Sweep) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Each (budget, the next one on its path) of :func:`trend_paths`."""
    return [step for path in trend_paths(sweep).values() for step in zip(path, path[1:])]


def depths(sweep: Sweep) -> list[int]:
    """The encoder depths of the depth stage (the budget stage's own included); none unless it ran mean and
    adapool."""
    if not ({"mean", "adapool"} <= set(sweep.settings["depth_poolers"]) and sweep.settings["depths"]):
        return []
    return sorted({sweep.layers, *sweep.settings["depths"]})


def before_budget(sweep: Sweep, before: tuple[dict, dict]) -> tuple[int, int] | None:
    """The earlier quick run's budget when it has vector0 at one of the sweep's K and the sweep has that budget."""
    results, cells = before
    if not any(k in cells.get("vector0", {}) for k in sweep.ks):
        return None
    budget = (results["settings"]["num_samples"], results["settings"]["epochs"])
    return budget if budget in sweep.budgets else None


def before_seeds(before: tuple[dict, dict], pooler: str, k: int) -> dict[int, float]:
    """{seed: test MSE} of one cell of the earlier quick run."""
    return {r["seed"]: r["test_mse"] for r in before[0]["runs"] if r["pooler"] == pooler and r["K"] == k}


def page_verdicts(sweep: Sweep, before: tuple[dict, dict]) -> Verdicts:
    """The page's readings, tested and Holm-adjusted together: adapool against mean, max and cls at each one's
    largest budget (every K for cls, the paper's SNR range for the others); the gap to mean pooling at each budget
    against the one below and with each depth against the base depth; adapool's spread against that of mean, max
    and cls; adapool against the analytic baselines; the earlier run's vector0 against the paper's cls and that
    run's adapool."""
    comparisons = []
    named = [p for p in PAPER_POOLERS if p in sweep.poolers]
    for p in named:
        top = sweep.top(p)
        comparisons += [lower_mse(mse_key("adapool", p, top, k), "adapool", p, sweep.per_seed("adapool", k, top),
                                  sweep.per_seed(p, k, top), f"log10 test MSE, K = {k}, {budget_name(sweep, top)}")
                        for k in gap_ks(sweep, p, top)]
    for k in sweep.low_ks():
        comparisons += [wider(trend_key(k, low, high), budget_label(high), budget_label(low), gap(sweep, k, high),
                              gap(sweep, k, low), k) for low, high in trend_steps(sweep)
                        if k in sweep.ks_at(high, "mean") and k in sweep.ks_at(high)]
    k, ref = sweep.settings["depth_k"], sweep.reference
    comparisons += [wider(depth_key(d), layers_name(d), layers_name(sweep.layers), gap(sweep, k, ref, d),
                          gap(sweep, k, ref), k) for d in depths(sweep) if d != sweep.layers]
    for p in named:
        for k in sweep.ks:
            ada, other = spread(sweep.per_seed("adapool", k)), spread(sweep.per_seed(p, k))
            comparisons.append(Comparison(spread_key(p, k), "adapool", p, *paired(ada, other),
                                          f"spread: ln MSE's distance from its cell's mean, K = {k}, "
                                          f"{budget_name(sweep, sweep.largest)}", higher_is_better=False, unit="%"))
    for name in BASELINES:
        for k in sweep.ks:
            ada = sweep.per_seed("adapool", k)
            comparisons.append(lower_mse(mse_key("adapool", name, sweep.largest, k), "adapool", name, ada,
                                         dict.fromkeys(ada, sweep.mse(name, k)),
                                         f"log10 test MSE, K = {k}, {budget_name(sweep, sweep.largest)}"))
    if budget := before_budget(sweep, before):
        vector0 = {k: before_seeds(before, "vector0", k) for k in sweep.ks}
        comparisons += [lower_mse(mse_key("vector0", "cls", budget, k), "vector0", "cls", vector0[k],
                                  sweep.per_seed("cls", k, budget), f"log10 test MSE, K = {k}, "
                                  f"{budget_name(sweep, budget)}: the earlier run's vector0, the sweep's cls")
                        for k in sweep.ks]
        comparisons += [lower_mse(mse_key("vector0", "adapool", budget, k), "vector0", "adapool", vector0[k],
                                  before_seeds(before, "adapool", k), f"log10 test MSE, K = {k}, the earlier run")
                        for k in sweep.ks]
    return Verdicts(comparisons)


def gap_ks(sweep: Sweep, pooler: str, budget: tuple[int, int]) -> list[int]:
    """The K values adapool is compared with ``pooler`` at: every K run there for cls, those in the paper's SNR
    range for the others."""
    run = set(sweep.ks_at(budget, pooler)) & set(sweep.ks_at(budget))
    return [k for k in (sweep.ks if pooler == "cls" else sweep.low_ks()) if k in run]


def budget_label(budget: tuple[int, int]) -> str:
    """A budget as samples x epochs: a comparison's condition."""
    return f"{budget[0]}x{budget[1]}"


def by_reading(tested: dict[int, Verdict]) -> str:
    """Each reading with the K values it holds at: 'adapool beats mean at K = 4, 16'."""
    groups: dict[str, list[str]] = {}
    for k, v in tested.items():
        groups.setdefault(v.reading, []).append(str(k))
    return "; ".join(f"{reading} at K = {', '.join(ks)}" for reading, ks in groups.items())


def change(v: Verdict) -> str:
    """A gap comparison's outcome: 'wider' or 'narrower' (condition a's gap against b's), or 'inside the noise'."""
    return "inside the noise" if not v.detected else "wider" if v.winner == v.comparison.a else "narrower"


def verdict(reproduced: bool, partly: bool) -> str:
    return "reproduced" if reproduced else "partly reproduced" if partly else "not reproduced"


def claim_gap(sweep: Sweep, verdicts: Verdicts) -> str:
    """The paper: adaptive pooling's error about 10x below mean, max and CLS pooling at SNR 0.03-0.25. Its
    direction: adapool beats each of them at every K in range; its size: every ratio's adjusted interval lies above
    :data:`SIZE_FLOOR`."""
    low = sweep.low_ks()
    tops = {p: sweep.top(p) for p in PAPER_POOLERS if p in sweep.poolers}
    in_range = {p: [k for k in gap_ks(sweep, p, top) if k in low] for p, top in tops.items()}
    gaps = {p: [sweep.ratio(p, k, top) for k in in_range[p]] for p, top in tops.items()}
    tested = {p: {k: verdicts[mse_key("adapool", p, top, k)] for k in in_range[p]} for p, top in tops.items()}
    direction = all(v.winner == "adapool" for vs in tested.values() for v in vs.values())
    # the ratio p / adapool is 10 ** -(log10 adapool - log10 p): its interval's bottom is 10 ** -high
    reach = [f"{p} at K = {k}" for p, vs in tested.items() for k, v in vs.items() if 10 ** -v.high >= SIZE_FLOOR]
    size = direction and len(reach) == sum(map(len, tested.values()))
    return (f"- **Adaptive pooling's error about an order of magnitude below mean, max and CLS pooling at SNR "
            f"0.03-0.25: {verdict(size, direction)}.** Each at the largest budget it was run at, over K = "
            f"{', '.join(map(str, low))}: "
            + ", ".join(f"{p} / adapool {span(g, unit='x')} at {budget_name(sweep, tops[p])}" for p, g in gaps.items())
            + ". Paired by seed on log10 test MSE: " + "; ".join(by_reading(vs) for vs in tested.values())
            + f". The ratio's adjusted interval lies above {SIZE_FLOOR:.1f}x (about an order of magnitude: nearer 10x "
            f"than 1x) for {', '.join(reach) or 'none of them'}.")


def claim_trend(sweep: Sweep, verdicts: Verdicts) -> str:
    """Whether mean / adapool grows with the budget, per K in the paper's SNR range, along each path of
    :func:`trend_paths` (more epochs; more samples): each step tested."""
    epochs = sweep.quick_budget[1]
    words = {"epochs": "More epochs", "samples": f"More samples at {epochs} epoch{'' if epochs == 1 else 's'}"}
    parts, outcomes = [], []
    for name, path in trend_paths(sweep).items():
        steps = []
        for k in sweep.low_ks():
            shown = [b for b in path if k in sweep.ks_at(b, "mean") and k in sweep.ks_at(b)]
            trend = [sweep.ratio("mean", k, b) for b in shown]
            tested = [change(verdicts[trend_key(k, a, b)]) for a, b in zip(shown, shown[1:])]
            outcomes += tested
            steps.append(f"at K = {k} " + " → ".join(f"{r:.2f}" for r in trend) + ", steps "
                         + ", ".join(f"{b / a - 1:+.0%} [{word}]" for a, b, word in zip(trend, trend[1:], tested)))
        parts.append(f"{words[name]}, over " + " → ".join(budget_label(b) for b in path) + ": " + "; ".join(steps))
    counts = ", ".join(f"{outcomes.count(word)} {word}" for word in ("wider", "narrower", "inside the noise")
                       if word in outcomes)
    return ("- **Does mean / adapool grow with the budget?** " + ". ".join(parts)
            + f". Each step tests log10(mean / adapool) per seed against the budget before it on its path: of the "
            f"{len(outcomes)} step{'' if len(outcomes) == 1 else 's'}, {counts}.")


def claim_variance(sweep: Sweep, verdicts: Verdicts) -> str:
    """The paper: adaptive pooling's variance across seeds over 50% below the others'. Its direction: adapool's
    spread is the lower one against every pooler it names at every K; its size: the CV ratio below 0.5."""
    ratios = cv_ratios(sweep)
    paper = {p: r for p, r in ratios.items() if p in PAPER_POOLERS}
    pairs = [x for r in paper.values() for x in r]
    tested = {p: {k: verdicts[spread_key(p, k)] for k in sweep.ks} for p in paper}
    direction = all(v.winner == "adapool" for vs in tested.values() for v in vs.values())
    size = direction and all(x < PAPER_STD_RATIO for x in pairs)
    return (f"- **Adaptive pooling's seed variance over 50% below that of mean, max and CLS pooling: "
            f"{verdict(size, direction)}.** At {budget_name(sweep, sweep.largest)}, adapool's coefficient of "
            f"variation over each other pooler's, over K = {', '.join(map(str, sweep.ks))}: "
            + ", ".join(f"{p} {span(r)}" for p, r in ratios.items())
            + f". Against {', '.join(paper)} it is below {PAPER_STD_RATIO:g} (the std reading of the claim; the "
            f"variance reading needs below {math.sqrt(PAPER_STD_RATIO):.2f}) in "
            f"{sum(x < PAPER_STD_RATIO for x in pairs)} of {len(pairs)} (pooler, K) pairs. Paired by seed on each "
            "run's distance from its cell, |ln MSE − the cell's mean|: "
            + "; ".join(by_reading(vs) for vs in tested.values()) + ".")


def claim_cls(sweep: Sweep, before: tuple[dict, dict], verdicts: Verdicts) -> str:
    """The paper's CLS against adapool at its largest budget, and the earlier run's type-marked vector 0 against
    the paper's cls and against that run's adapool."""
    top = sweep.top("cls")
    ks = gap_ks(sweep, "cls", top)
    text = (f"- **The paper's CLS:** cls / adapool at {budget_name(sweep, top)} "
            + ", ".join(f"{sweep.ratio('cls', k, top):.2f} at K = {k}" for k in ks) + "; paired by seed: "
            + by_reading({k: verdicts[mse_key("adapool", "cls", top, k)] for k in ks}) + ".")
    if budget := before_budget(sweep, before):
        old = before[1]["vector0"]
        ks = [k for k in sweep.ks if k in old]
        text += (f" At {budget_name(sweep, budget)} the earlier quick run's vector0 (then called cls; lr "
                 f"{before[0]['settings']['lr']:g}) had " + ", ".join(f"{mse(old[k][0])} at K = {k}" for k in ks)
                 + "; the paper's cls here has " + ", ".join(mse(sweep.mse("cls", k, budget)) for k in ks)
                 + f" (lr {sweep.cell('cls', ks[0], budget)['lr']:g}): "
                 + by_reading({k: verdicts[mse_key("vector0", "cls", budget, k)] for k in ks})
                 + ". Against that run's own adapool: "
                 + by_reading({k: verdicts[mse_key("vector0", "adapool", budget, k)] for k in ks}) + ".")
    return text


def claim_depth(sweep: Sweep, verdicts: Verdicts) -> str:
    k, ref = sweep.settings["depth_k"], sweep.reference
    deeper = [d for d in depths(sweep) if d != sweep.layers]
    return (f"- **Depth** (K = {k}, {budget_name(sweep, ref)}): mean / adapool is "
            + ", ".join(f"{sweep.ratio('mean', k, ref, d):.2f} with {layers_name(d)}" for d in depths(sweep))
            + f". Against {layers_name(sweep.layers)}, log10(mean / adapool) per seed: "
            + ", ".join(f"{layers_name(d)} {change(verdicts[depth_key(d)])}" for d in deeper) + ".")


def claim_budget(sweep: Sweep) -> str:
    """The runs whose best validation epoch was the last, per budget and pooler, and the (pooler, budget) cells
    that are under-trained: most of their runs had it last."""
    parts, under = [], []
    for budget in sweep.all_budgets:
        last = {p: [r["best_epoch"] == len(r["val_loss"]) - 1 for r in sweep.stage_runs("budget", budget)
                    if r["pooler"] == p] for p in sweep.poolers}
        last = {p: v for p, v in last.items() if v}
        if not last:
            continue
        parts.append(f"at {budget_name(sweep, budget)} the best epoch was the last one in "
                     f"{sum(map(sum, last.values()))} of {sum(map(len, last.values()))} runs ("
                     + ", ".join(f"{p} {sum(v)} of {len(v)}" for p, v in last.items()) + ")")
        most = [p for p, v in last.items() if 2 * sum(v) > len(v)]
        under.append(f"{sweep.times(budget)}× " + ("every pooler" if len(most) == len(last) else
                                                    ", ".join(most) or "none"))
    return (f"- **Training budget:** {'; '.join(parts)}. Under-trained (most of a cell's runs had their best epoch "
            f"last): {'; '.join(under)}.")


def claim_baselines(sweep: Sweep, verdicts: Verdicts) -> str:
    return (f"- **Against the analytic baselines** at {budget_name(sweep, sweep.largest)}, per seed against the "
            "baseline's one value on the same test rows: "
            + "; ".join(by_reading({k: verdicts[mse_key("adapool", name, sweep.largest, k)] for k in sweep.ks})
                        for name in BASELINES) + ".")


def render_claims(sweep: Sweep, before: tuple[dict, dict], verdicts: Verdicts) -> str:
    """Each of the paper's claims with its verdict, and the sweep's findings, from the result files and the
    page's tests (``page_verdicts``)."""
    lines = [claim_gap(sweep, verdicts), claim_trend(sweep, verdicts), claim_variance(sweep, verdicts)]
    if "cls" in sweep.poolers:
        lines.append(claim_cls(sweep, before, verdicts))
    if depths(sweep):
        lines.append(claim_depth(sweep, verdicts))
    return "\n".join([*lines, claim_budget(sweep), claim_baselines(sweep, verdicts)])


def render() -> dict[str, str]:
    base = read_json(FOLDER / "baselines.json")
    before = load_before()
    sweep = Sweep.load()
    verdicts = page_verdicts(sweep, before)
    return {**render_baselines(base), "runtime": render_runtime(before[0]), "full": render_full(FULL),
            "settings": render_settings(FULL, QUICK), "results": render_results(*before),
            "sweep-settings": render_sweep_settings(sweep), "lr": render_lr(sweep),
            "budget-results": render_budget_results(sweep), "ratios": render_ratios(sweep),
            "extension": render_extension(sweep), "depth": render_depth(sweep), "variance": render_variance(sweep),
            "claims": render_claims(sweep, before, verdicts), "verdicts": verdicts.block()}


PAGE = Page("docs/snr.md", render, readings=True)
