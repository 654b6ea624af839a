"""docs/channel-spatial.md's numbers, rendered from the committed run in docs/channel-spatial/ (``poolkit bench
channel-spatial --out docs/channel-spatial``), the presets in ``poolkit_bench.channel_spatial`` and the block registry.
"""

from __future__ import annotations

import pandas as pd
from rendering import (ROOT, Page, changed_settings, difference, load_and_machine, points, presets_table, run_files,
                       table)

from poolkit_bench.channel_spatial import BASELINE, PAPER, PRESETS, summarize_runs
from poolkit_bench.vision import summarize
from poolkit.blocks import block_class, block_options, get_block, list_blocks

FOLDER = ROOT / "docs" / "channel-spatial"
#: The channel count at which the catalogue counts parameters (a typical last stage).
CATALOGUE_CHANNELS = 64


def diff_text(row) -> str:
    """A summary row's paired difference from its baseline, in points (*(noise)*: its 95% t-interval contains 0)."""
    return difference(row["diff_mean"], row["diff_std"], row["inside_noise"])


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
    return presets_table("poolkit_bench.channel_spatial", PRESETS, column, names)


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


def render_table(summary: pd.DataFrame, speed: pd.DataFrame, task: str) -> str:
    part = summary[summary["task"] == task]
    sizes = sorted(part["size"].unique())
    header = ["block", "family", *(part for n in sizes for part in (f"{n:,} images: accuracy %", "vs none (points)")),
              "block parameters", "forward time (× none)"]
    rows = []
    for name in dict.fromkeys(part["block"]):
        cells = [f"`{name}`", family(name)]
        for size in sizes:
            row = part[(part["block"] == name) & (part["size"] == size)].iloc[0]
            cells += [f"{points(row['mean'])} ± {points(row['std'])}", "—" if name == BASELINE else diff_text(row)]
        cost = speed.loc[name]
        rows.append([*cells, f"{int(cost['block_params']):,}", f"{cost['forward_ms']:.1f} ms ({cost['vs_none']:.2f}×)"])
    return table(header, rows, align="ll" + "r" * (len(header) - 2))


def pick_for(size: int) -> tuple[str, dict]:
    """The paper's regime for a training-set size and its recommendation."""
    for regime in ("small", "medium", "large"):
        below = PAPER[regime]["below"]
        if below is None or size < below:
            return regime, PAPER[regime]


def render_guidance() -> str:
    small, medium = PAPER["small"]["below"], PAPER["medium"]["below"]
    return table(["data size (the paper's regimes)", "the paper's pick", "poolkit block"], [
        [f"small, < {small:,} images", PAPER["small"]["words"], f"`{PAPER['small']['block']}`"],
        [f"medium, {small:,}-{medium:,}", PAPER["medium"]["words"], f"`{PAPER['medium']['block']}`"],
        [f"large, > {medium:,}", PAPER["large"]["words"], f"`{PAPER['large']['block']}`"],
        ["fine-grained classes", '"Spatial-Channel" order, more stable and effective',
         f"`{PAPER['fine']['better']}` over `{PAPER['fine']['than']}`"],
        ["every scale", "residual connections help", "`residual` over `ca_sa` (the same chain without the identity)"]])


def render_verdicts(frame: pd.DataFrame, summary: pd.DataFrame) -> str:
    """Per size: the best block and its family, whether it stands out from none and from the other blocks, the paper's
    pick for that size and how it fares; then the residual claim."""
    lines = []
    part = summary[summary["task"] == "all"]
    for size in sorted(part["size"].unique()):
        cell = part[(part["size"] == size) & (part["block"] != BASELINE)].set_index("block")
        best = cell["mean"].idxmax()
        above = cell[~cell["inside_noise"] & (cell["diff_mean"] > 0)].index.tolist()
        below = cell[~cell["inside_noise"] & (cell["diff_mean"] < 0)].index.tolist()
        runs = frame[(frame["task"] == "all") & (frame["size"] == size) & (frame["block"] != BASELINE)]
        vs_best = summarize(runs, columns=("task", "block"), baseline=best).set_index("block").drop(best)
        beaten = vs_best[~vs_best["inside_noise"] & (vs_best["diff_mean"] < 0)].index.tolist()
        if above:
            winner = (f"**{', '.join(f'`{n}`' for n in above)}** above none beyond seed noise; the best mean is "
                      f"`{best}` ({family(best)}), {diff_text(cell.loc[best])} points")
        else:
            winner = (f"**no block is detectably above none**; the best mean is `{best}` ({family(best)}), "
                      f"{diff_text(cell.loc[best])} points")
        regime, paper = pick_for(int(size))
        pick = paper["block"]
        if pick not in cell.index:
            verdict = f"the paper's pick for {regime} data, `{pick}`, was not run"
        else:
            rank = int((cell["mean"] > cell.loc[pick, "mean"]).sum()) + 1
            if pick == best and pick in above and len(beaten) == len(vs_best):
                reading = "**the guidance holds here** (best, and detectably above none and every other block)"
            elif pick in below:
                reading = "**detectably below no attention**, against the guidance"
            elif pick in beaten:
                reading = f"**detectably below the best block, `{best}`**, against the guidance"
            else:
                reading = ("**not supported**: it does not stand out from none and the other blocks beyond seed "
                           "noise")
            verdict = (f"the paper's pick for {regime} data, `{pick}`, ranks {rank} of {len(cell)} blocks, "
                       f"{diff_text(cell.loc[pick])} points vs none; {reading}")
        lines.append(f"- **{size:,} images:** {winner}. Detectably below none: "
                     f"{', '.join(f'`{n}`' for n in below) or 'none'}. Detectably below the best block "
                     f"(paired): {', '.join(f'`{n}`' for n in beaten) or 'none'}. For the guidance: {verdict}.")
    residual = []
    for size in sorted(part["size"].unique()):
        runs = frame[(frame["task"] == "all") & (frame["size"] == size) & frame["block"].isin(["residual", "ca_sa"])]
        if set(runs["block"]) == {"residual", "ca_sa"}:
            row = summarize(runs, columns=("task", "block"), baseline="ca_sa").set_index("block").loc["residual"]
            residual.append(f"{size:,} images {diff_text(row)}")
    if residual:
        lines.append("- **Residual connections** (`residual` − `ca_sa`, paired, points): " + "; ".join(residual)
                     + ".")
    return "\n".join(lines)


def render_fine(results: dict, summary: pd.DataFrame, speed: pd.DataFrame) -> str:
    s, order = results["settings"], results["ordering"]
    if not s["fine_blocks"]:
        return "The committed run skipped the fine-grained task."
    blocks = render_table(summary, speed, "fine")
    part = summary[summary["task"] == "fine"].set_index("block")
    text = (f"Classes {', '.join(map(str, s['fine_classes']))} of {s['dataset']} (T-shirt/top, pullover, coat, shirt "
            f"for Fashion-MNIST), relabelled 0-{len(s['fine_classes']) - 1}; {s['fine_size']:,} training images, "
            f"{s['fine_epochs']} epochs, {s['seeds']} seeds.\n\n{blocks}\n\n")
    if order is None:
        return text + "The run did not include both orders."
    better, than = order["better"], order["than"]
    return text + (f"`{better}` − `{than}`, paired per seed: "
                   f"{difference(order['diff_mean'], order['diff_std'], False)} points (95% interval ± {points(order['diff_ci95'])}): "
                   + ("**no detectable difference**" if order["inside_noise"] else
                      "**spatial-first is detectably better**" if order["diff_mean"] > 0 else
                      "**spatial-first is detectably worse**, against the paper")
                   + f". Seed-to-seed std, for the stability claim: `{better}` {points(part.loc[better, 'std'])}, "
                     f"`{than}` {points(part.loc[than, 'std'])} points (from {s['seeds']} seeds each: a std that is "
                     "itself noisy).")


def render() -> dict[str, str]:
    results, frame = run_files(FOLDER)
    summary = summarize_runs(frame)
    speed = pd.DataFrame(results["speed"]).set_index("block")
    return {"catalogue": render_catalogue(), "presets": render_presets(), "guidance": render_guidance(),
            "cost": render_cost(results), "table": render_table(summary, speed, "all"),
            "verdicts": render_verdicts(frame, summary), "fine": render_fine(results, summary, speed)}


PAGE = Page("docs/channel-spatial.md", render)
