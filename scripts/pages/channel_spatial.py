"""docs/channel-spatial.md's numbers, rendered from the committed run in docs/channel-spatial/ (``poolkit bench
channel-spatial --out docs/channel-spatial``), the presets in ``poolkit_bench.channel_spatial_config`` and the block
registry.
Every reading comes from one ``Verdicts`` over the page (:func:`comparisons`), paired per seed and Holm-adjusted
together.
"""

from __future__ import annotations

import pandas as pd
from rendering import (ROOT, Page, accuracy_cells, changed_settings, difference, load_and_machine, points,
                       presets_table, run_files, table)
from verdicts import Comparison, Verdict, Verdicts, counted, grouped_readings, last_epochs

from poolkit_bench.channel_spatial import PAPER, summarize_runs
from poolkit_bench.channel_spatial_config import BASELINE, PRESETS
from poolkit.blocks import block_class, block_options, get_block, list_blocks

FOLDER = ROOT / "docs" / "channel-spatial"
#: The channel count at which the catalogue counts parameters (a typical last stage).
CATALOGUE_CHANNELS = 64
TASKS = {"all": "all ten classes", "fine": "fine-grained subset"}


def family(name: str) -> str:
    return "no attention" if name == BASELINE else block_class(name).family


def render_catalogue() -> str:
    """Every registered block: family, formula (its docstring) and parameters at 64 channels, default options."""
    lines = ["Rendered from the registry (`poolkit.list_blocks()`); parameters of one block at "
             f"C = {CATALOGUE_CHANNELS} with the default options (reduction r = {block_options('ca')['reduction']}, "
             f"kernel {block_options('sa')['kernel_size']}).", ""]
    rows = [[f"`{name}`", block_class(name).family, " ".join(block_class(name).__doc__.split()).replace("|", "&#124;"),
             f"{sum(p.numel() for p in get_block(name, channels=CATALOGUE_CHANNELS).parameters()):,}"]
            for name in list_blocks()]
    return "\n".join([*lines, table(["block", "family", "formula", "parameters"], rows, align="lllr")])


def render_presets() -> str:
    def column(c) -> list[str]:
        threads = "default threads" if c.threads is None else f"{c.threads} torch thread each"
        blocks = "every block" if "all" in c.blocks else ", ".join(c.blocks)
        return [c.dataset, ", ".join(f"{s:,}" for s in c.sizes), ", ".join(map(str, c.epochs)), f"{c.val_size:,}",
                blocks, f"{', '.join(c.fine_blocks)} on classes {', '.join(map(str, c.fine_classes))}, "
                        f"{c.fine_size:,} images, {c.fine_epochs} epochs",
                "-".join(map(str, c.widths)), ", ".join(map(str, c.stages)), str(c.reduction),
                f"AdamW lr {c.lr:g} (one-cycle), weight decay {c.weight_decay:g}, batch {c.batch_size}", str(c.seeds),
                f"{c.workers} worker(s), `--device {c.device}`, {threads}"]
    names = ["data", "training images per run", "epochs (per size)", "validation images", "blocks",
             "fine-grained task", "CNN widths", "blocks after stages", "reduction r", "optimiser", "seeds", "execution"]
    return presets_table("poolkit_bench.channel_spatial_config", PRESETS, column, names)


def render_cost(results: dict) -> str:
    s, runs, prov = results["settings"], results["runs"], results["provenance"]
    default = PRESETS["default"]
    changed = changed_settings(s, default)
    fits = sum(r["cpu_seconds"] for r in runs)
    tasks = (f"{len(s['blocks'])} variants × {len(s['sizes'])} sizes ({', '.join(f'{n:,}' for n in s['sizes'])} "
             f"images, {', '.join(map(str, s['epochs']))} epochs) × {s['seeds']} seeds on all ten classes")
    if s["fine_blocks"]:
        tasks += (f", plus {len(s['fine_blocks'])} variants × {s['seeds']} seeds on the fine-grained subset "
                  f"({s['fine_size']:,} images, {s['fine_epochs']} epochs)")
    return (f"The committed run (`docs/channel-spatial/results.json`; settings that differ from the default preset: "
            f"{changed}): {tasks}, {len(runs)} runs in all. It took "
            f"{results['runtime_seconds'] / 60:.1f} minutes of wall time and {results['cpu_seconds'] / 60:.1f} "
            f"CPU-minutes ({fits / 60:.1f} of them in the runs' training and scoring) with {s['workers']} worker "
            f"process(es) of {s['threads']} torch thread each, on {prov['cores']} cores that other jobs shared; "
            f"CPU-minutes / 2 = {results['cpu_seconds'] / 2 / 60:.1f} minutes is the wall time to expect on 2 idle "
            "cores. " + load_and_machine(results))


def pick_for(size: int) -> tuple[str, dict]:
    """The paper's regime for a training-set size and its recommendation."""
    for regime in ("small", "medium", "large"):
        below = PAPER[regime]["below"]
        if below is None or size < below:
            return regime, PAPER[regime]



def quoted(names) -> str:
    """'`a`, `b`', or 'none' for no names."""
    return ", ".join(f"`{n}`" for n in names) or "none"


def render_coverage(frame: pd.DataFrame) -> str:
    """How many of the catalogue's blocks the run trained, which it left out, and which of the paper's regimes its
    sizes fall in."""
    catalogue = list_blocks()
    ran = [name for name in catalogue if name in set(frame["block"])]
    per_task = "; ".join(f"{TASKS[task]}: {quoted(n for n in dict.fromkeys(part['block']) if n != BASELINE)}"
                         for task, part in frame.groupby("task", sort=False))
    sizes = sorted(int(n) for n in frame.loc[frame["task"] == "all", "size"].unique())
    covered = {pick_for(size)[0] for size in sizes}
    regimes = ("small", "medium", "large")
    missing = [f"{regime} regime (its pick `{PAPER[regime]['block']}`)" for regime in regimes if regime not in covered]
    return (f"The committed run trained {len(ran)} of the catalogue's {len(catalogue)} blocks, beside no attention "
            f"({per_task}); the other {len(catalogue) - len(ran)} did not run: "
            f"{quoted(n for n in catalogue if n not in ran)}. Its sizes on all ten classes "
            f"({', '.join(f'{n:,}' for n in sizes)} images) fall in the paper's "
            f"{' and '.join(r for r in regimes if r in covered)} regimes"
            + (f"; none in its {' or '.join(missing)}." if missing else "."))


def key(task: str, size: int, a: str, b: str) -> str:
    """The key of comparison ``a`` against ``b`` in one task and size."""
    return f"{task} {size} {a} - {b}"


def declared_pairs(task: str, size: int, blocks: list[str]) -> list[tuple[str, str]]:
    """The (a, b) pairs the page reads in one task and size, each once: every block against none; on all ten
    classes the paper's pick for the size against every other block, and residual against ca_sa (the residual
    claim); on the fine-grained subset spatial-first against channel-first (the ordering claim)."""
    pairs = [(name, BASELINE) for name in blocks if name != BASELINE]
    if task == "all":
        pick = pick_for(size)[1]["block"]
        pairs += [(pick, name) for name in blocks if pick in blocks and name not in (BASELINE, pick)]
        pairs += [("residual", "ca_sa")]
    else:
        pairs += [(PAPER["fine"]["better"], PAPER["fine"]["than"])]
    found = {}
    for a, b in pairs:
        if {a, b} <= set(blocks):
            found.setdefault(frozenset((a, b)), (a, b))
    return list(found.values())


def comparisons(frame: pd.DataFrame) -> list[Comparison]:
    """The page's comparisons on test accuracy (:func:`declared_pairs`), paired per seed, per task and size."""
    found = []
    for (task, size), part in frame.groupby(["task", "size"], sort=False):
        accuracy = part.pivot(index="seed", columns="block", values="accuracy")
        for a, b in declared_pairs(task, int(size), list(dict.fromkeys(part["block"]))):
            both = accuracy[[a, b]].dropna()
            found.append(Comparison(key(task, int(size), a, b), a, b, both[a].tolist(), both[b].tolist(),
                                    f"test accuracy, {TASKS[task]}, {int(size):,} images", digits=2))
    return found


def pair(verdicts: Verdicts, task: str, size: int, a: str, b: str) -> Verdict:
    """The verdict on a and b, whichever way round the page declared them."""
    try:
        return verdicts[key(task, size, a, b)]
    except KeyError:
        return verdicts[key(task, size, b, a)]


def render_table(summary: pd.DataFrame, speed: pd.DataFrame, task: str, verdicts: Verdicts) -> str:
    part = summary[summary["task"] == task]
    sizes = sorted(part["size"].unique())
    header = ["block", "family", *(part for n in sizes for part in (f"{n:,} images: accuracy %", "vs none (points)")),
              "block parameters", "forward time (× none)"]
    rows = []
    for name in dict.fromkeys(part["block"]):
        cells = [f"`{name}`", family(name)]
        for size in sizes:
            row = part[(part["block"] == name) & (part["size"] == size)].iloc[0]
            cells += accuracy_cells(row, name == BASELINE, verdicts[key(task, int(size), name, BASELINE)].mark
                                    if name != BASELINE else "")
        cost = speed.loc[name]
        rows.append([*cells, f"{int(cost['block_params']):,}",
                     f"{cost['forward_ms']:.1f} ms ({cost['vs_none']:.2f}×)"])
    return "\n".join(["Test accuracy, mean ± sample std over seeds; vs none: the mean ± sample std of the per-seed "
                      "differences to the CNN without attention, *(noise)* when its paired t-test, Holm-adjusted over "
                      "the page (the verdicts block), leaves it inside the noise.", "",
                      table(header, rows, align="ll" + "r" * (len(header) - 2))])


def render_epochs(frame: pd.DataFrame) -> str:
    """Per block, task and size, the runs whose chosen (best-validation) epoch is the last of their budget (the
    results record best_epoch from 0); 'under-trained' where most are."""
    runs = frame.assign(last=frame["best_epoch"] == frame["epochs"] - 1)
    columns = list(dict.fromkeys(zip(runs["task"], runs["size"], runs["epochs"])))

    def where(task: str, size: int, epochs: int) -> str:
        return f"{TASKS[task]}, {size:,} images ({epochs} epochs)"

    cells = {group: last_epochs(last) for group, last in runs.groupby(["block", "task", "size"], sort=False)["last"]}
    rows = [[f"`{name}`", *(cells.get((name, t, n), "—") for t, n, _ in columns)]
            for name in dict.fromkeys(runs["block"])]
    totals = "; ".join(f"{where(t, n, e)}: {last_epochs(runs[(runs['task'] == t) & (runs['size'] == n)]['last'])}"
                       for t, n, e in columns)
    return "\n".join([f"Runs whose chosen epoch is the last of their budget: {counted(runs['last'])} in all; {totals}.",
                      "", table(["block", *(where(*c) for c in columns)], rows, align="l" + "r" * len(columns))])


def render_guidance() -> str:
    small, medium = PAPER["small"]["below"], PAPER["medium"]["below"]
    return table(["data size (the paper's regimes)", "the paper's pick", "poolkit block"], [
        [f"small, < {small:,} images", PAPER["small"]["words"], f"`{PAPER['small']['block']}`"],
        [f"medium, {small:,}-{medium:,}", PAPER["medium"]["words"], f"`{PAPER['medium']['block']}`"],
        [f"large, > {medium:,}", PAPER["large"]["words"], f"`{PAPER['large']['block']}`"],
        ["fine-grained classes", '"Spatial-Channel" order, more stable and effective',
         f"`{PAPER['fine']['better']}` over `{PAPER['fine']['than']}`"],
        ["every scale", "residual connections help", "`residual` over `ca_sa` (the same chain without the identity)"]])


def render_verdicts(summary: pd.DataFrame, verdicts: Verdicts) -> str:
    """Per size: the best mean, the readings against none, the paper's pick for that size against none and every
    other block, and what that says of the guidance; then the residual claim, each from the page's ``verdicts``."""
    lines = []
    part = summary[summary["task"] == "all"]
    sizes = [int(n) for n in sorted(part["size"].unique())]
    for size in sizes:
        cell = part[(part["size"] == size) & (part["block"] != BASELINE)].set_index("block")
        best = cell["mean"].idxmax()
        against_none = grouped_readings([pair(verdicts, "all", size, name, BASELINE) for name in cell.index],
                                        BASELINE)
        regime, paper = pick_for(size)
        pick = paper["block"]
        if pick not in cell.index:
            guidance = f"the paper's pick for {regime} data, `{pick}`, was not run"
        else:
            rank = int((cell["mean"] > cell.loc[pick, "mean"]).sum()) + 1
            tested = [pair(verdicts, "all", size, pick, name) for name in [BASELINE, *cell.index] if name != pick]
            above = [v.winner for v in tested if v.detected and v.winner != pick]
            if all(v.winner == pick for v in tested):
                outcome = f"**the guidance holds here** (`{pick}` beats none and every other block)"
            elif BASELINE in above:
                outcome = "**detectably below no attention**, against the guidance"
            elif above:
                outcome = f"**detectably below {quoted(above)}**, against the guidance"
            else:
                outcome = f"**not supported**: `{pick}` does not beat none and every other block"
            guidance = (f"the paper's pick for {regime} data, `{pick}`, ranks {rank} of {len(cell)} blocks by mean "
                        f"(untested); {grouped_readings(tested, pick)}; {outcome}")
        lines.append(f"- **{size:,} images:** the best mean (untested) is `{best}` ({family(best)}), "
                     f"{difference(cell.loc[best, 'diff_mean'], cell.loc[best, 'diff_std'])} points vs none; "
                     f"{against_none}. For the guidance: {guidance}.")
    residual = [f"{size:,} images: {pair(verdicts, 'all', size, 'residual', 'ca_sa').sentence()}" for size in sizes
                if {"residual", "ca_sa"} <= set(part.loc[part["size"] == size, "block"])]
    if residual:
        lines.append("- **Residual connections** (`residual` against `ca_sa`, the same chain without the identity, "
                     "paired per seed): " + "; ".join(residual) + ".")
    return "\n".join(lines)


def render_fine(results: dict, summary: pd.DataFrame, speed: pd.DataFrame, verdicts: Verdicts) -> str:
    s = results["settings"]
    if not s["fine_blocks"]:
        return "The committed run skipped the fine-grained task."
    part = summary[summary["task"] == "fine"].set_index("block")
    text = (f"Classes {', '.join(map(str, s['fine_classes']))} of {s['dataset']} (T-shirt/top, pullover, coat, shirt "
            f"for Fashion-MNIST), relabelled 0-{len(s['fine_classes']) - 1}; {s['fine_size']:,} training images, "
            f"{s['fine_epochs']} epochs, {s['seeds']} seeds.\n\n{render_table(summary, speed, 'fine', verdicts)}\n\n")
    better, than = PAPER["fine"]["better"], PAPER["fine"]["than"]
    if not {better, than} <= set(part.index):
        return text + "The run did not include both orders."
    order = pair(verdicts, "fine", s["fine_size"], better, than)
    outcome = ("as the paper says" if order.winner == better else "against the paper" if order.winner == than else
               "the paper's ordering claim is not supported here")
    return text + (f"Spatial first against channel first: {order.sentence()}: {outcome}. Seed-to-seed std, for the "
                   f"stability claim (not tested): `{better}` {points(part.loc[better, 'std'])}, `{than}` "
                   f"{points(part.loc[than, 'std'])} points (from {s['seeds']} seeds each: a std that is itself "
                   "noisy).")


def page_verdicts(frame: pd.DataFrame) -> Verdicts:
    """The page's one family: every task's and size's comparisons, tested and Holm-adjusted together."""
    return Verdicts(comparisons(frame))


def render() -> dict[str, str]:
    results, frame = run_files(FOLDER)
    summary, verdicts = summarize_runs(frame), page_verdicts(frame)
    speed = pd.DataFrame(results["speed"]).set_index("block")
    return {"catalogue": render_catalogue(), "presets": render_presets(), "guidance": render_guidance(),
            "cost": render_cost(results), "coverage": render_coverage(frame),
            "table": render_table(summary, speed, "all", verdicts), "epochs": render_epochs(frame),
            "findings": render_verdicts(summary, verdicts),
            "fine": render_fine(results, summary, speed, verdicts), "verdicts": verdicts.block()}


PAGE = Page("docs/channel-spatial.md", render, readings=True)
