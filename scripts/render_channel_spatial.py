"""docs/channel-spatial.md's numbers, rendered from the committed run in docs/channel-spatial/ (``poolkit bench
channel-spatial --out docs/channel-spatial``), the presets in ``poolkit_bench.channel_spatial`` and the block registry.

    .venv/bin/python scripts/render_channel_spatial.py --check     # exit 1 when the page differs from the files
    .venv/bin/python scripts/render_channel_spatial.py --write     # update the page's marked blocks
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import markers  # noqa: E402

from poolkit_bench.channel_spatial import BASELINE, PAPER, PRESETS, summarize_runs  # noqa: E402
from poolkit_bench.vision import summarize  # noqa: E402
from poolkit.blocks import block_class, block_options, get_block, list_blocks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "channel-spatial.md"
FOLDER = ROOT / "docs" / "channel-spatial"
#: The channel count at which the catalogue counts parameters (a typical last stage).
CATALOGUE_CHANNELS = 64


def points(value: float) -> str:
    return f"{100 * value:.2f}"


def diff_text(row) -> str:
    """'+0.12 ± 0.30' points, with *(noise)* when the 95% t-interval of the paired differences contains 0."""
    return f"{100 * row['diff_mean']:+.2f} ± {points(row['diff_std'])}" + (" *(noise)*" if row["inside_noise"] else "")


def family(name: str) -> str:
    return "no attention" if name == BASELINE else block_class(name).family


def render_catalogue() -> str:
    """Every registered block: family, formula (its docstring) and parameters at 64 channels, default options."""
    lines = ["Rendered from the registry (`poolkit.list_blocks()`); parameters of one block at "
             f"C = {CATALOGUE_CHANNELS} with the default options (reduction r = {block_options('ca')['reduction']}, "
             f"kernel {block_options('sa')['kernel_size']}).", "",
             "| block | family | formula | parameters |", "|---|---|---|---:|"]
    for name in list_blocks():
        doc = " ".join(block_class(name).__doc__.split())
        params = sum(p.numel() for p in get_block(name, channels=CATALOGUE_CHANNELS).parameters())
        lines.append(f"| `{name}` | {block_class(name).family} | {doc.replace('|', '&#124;')} | {params:,} |")
    return "\n".join(lines)


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
    rows = ["Rendered from `poolkit_bench.channel_spatial.PRESETS`:", "",
            "| setting | default | `--full` | `--quick` |", "|---|---|---|---|"]
    cols = [column(PRESETS[p]) for p in ("default", "full", "quick")]
    rows += [f"| {n} | " + " | ".join(c[i] for c in cols) + " |" for i, n in enumerate(names)]
    return "\n".join(rows)


def render_cost(results: dict) -> str:
    s, runs, prov = results["settings"], results["runs"], results["provenance"]
    default = PRESETS["default"]
    changed = [f"{key} {value}" for key, value in s.items()
               if key != "preset" and json.loads(json.dumps(getattr(default, key))) != value]
    fits = sum(r["cpu_seconds"] for r in runs)
    tasks = (f"{len(s['blocks'])} variants × {len(s['sizes'])} sizes ({', '.join(f'{n:,}' for n in s['sizes'])} "
             f"images, {', '.join(map(str, s['epochs']))} epochs) × {s['seeds']} seeds on all ten classes")
    if s["fine_blocks"]:
        tasks += (f", plus {len(s['fine_blocks'])} variants × {s['seeds']} seeds on the fine-grained subset "
                  f"({s['fine_size']:,} images, {s['fine_epochs']} epochs)")
    return (f"The committed run (`docs/channel-spatial/results.json`; settings that differ from the default preset: "
            f"{'; '.join(changed) or 'none'}): {tasks}, {len(runs)} runs in all. It took "
            f"{results['runtime_seconds'] / 60:.1f} minutes of wall time and {results['cpu_seconds'] / 60:.1f} "
            f"CPU-minutes ({fits / 60:.1f} of them in the runs' training and scoring) with {s['workers']} worker "
            f"process(es) of {s['threads']} torch thread each, on {prov['cores']} cores that other jobs shared; "
            f"CPU-minutes / 2 = {results['cpu_seconds'] / 2 / 60:.1f} minutes is the wall time to expect on 2 idle "
            f"cores. Load average (1 min) {results['load_average_start_end'][0][0]:.1f} at the start, "
            f"{results['load_average_start_end'][1][0]:.1f} at the end. Commit "
            f"{prov['commit'][:10] if prov.get('commit') else 'unknown'}, torch {prov['torch']}, {prov['cpu']}.")


def render_table(summary: pd.DataFrame, speed: pd.DataFrame, task: str) -> str:
    part = summary[summary["task"] == task]
    sizes = sorted(part["size"].unique())
    head = ("| block | family | " + " | ".join(f"{n:,} images: accuracy % | vs none (points)" for n in sizes)
            + " | block parameters | forward time (× none) |")
    lines = [head, "|---|---|" + "---:|---:|" * len(sizes) + "---:|---:|"]
    for name in dict.fromkeys(part["block"]):
        cells = []
        for size in sizes:
            row = part[(part["block"] == name) & (part["size"] == size)].iloc[0]
            cells += [f"{points(row['mean'])} ± {points(row['std'])}", "—" if name == BASELINE else diff_text(row)]
        cost = speed.loc[name]
        lines.append(f"| `{name}` | {family(name)} | " + " | ".join(cells)
                     + f" | {int(cost['block_params']):,} | {cost['forward_ms']:.1f} ms ({cost['vs_none']:.2f}×) |")
    return "\n".join(lines)


def pick_for(size: int) -> tuple[str, dict]:
    """The paper's regime for a training-set size and its recommendation."""
    for regime in ("small", "medium", "large"):
        below = PAPER[regime]["below"]
        if below is None or size < below:
            return regime, PAPER[regime]


def render_guidance() -> str:
    small, medium = PAPER["small"]["below"], PAPER["medium"]["below"]
    return "\n".join([
        "| data size (the paper's regimes) | the paper's pick | poolkit block |", "|---|---|---|",
        f"| small, < {small:,} images | {PAPER['small']['words']} | `{PAPER['small']['block']}` |",
        f"| medium, {small:,}-{medium:,} | {PAPER['medium']['words']} | `{PAPER['medium']['block']}` |",
        f"| large, > {medium:,} | {PAPER['large']['words']} | `{PAPER['large']['block']}` |",
        f"| fine-grained classes | \"Spatial-Channel\" order, more stable and effective | `{PAPER['fine']['better']}` "
        f"over `{PAPER['fine']['than']}` |",
        "| every scale | residual connections help | `residual` over `ca_sa` (the same chain without the identity) |"])


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
    table = render_table(summary, speed, "fine")
    part = summary[summary["task"] == "fine"].set_index("block")
    text = (f"Classes {', '.join(map(str, s['fine_classes']))} of {s['dataset']} (T-shirt/top, pullover, coat, shirt "
            f"for Fashion-MNIST), relabelled 0-{len(s['fine_classes']) - 1}; {s['fine_size']:,} training images, "
            f"{s['fine_epochs']} epochs, {s['seeds']} seeds.\n\n{table}\n\n")
    if order is None:
        return text + "The run did not include both orders."
    better, than = order["better"], order["than"]
    return text + (f"`{better}` − `{than}`, paired per seed: {100 * order['diff_mean']:+.2f} ± "
                   f"{points(order['diff_std'])} points (95% interval ± {points(order['diff_ci95'])}): "
                   + ("**no detectable difference**" if order["inside_noise"] else
                      "**spatial-first is detectably better**" if order["diff_mean"] > 0 else
                      "**spatial-first is detectably worse**, against the paper")
                   + f". Seed-to-seed std, for the stability claim: `{better}` {points(part.loc[better, 'std'])}, "
                     f"`{than}` {points(part.loc[than, 'std'])} points (from {s['seeds']} seeds each: a std that is "
                     "itself noisy).")


def render(folder: Path = FOLDER) -> dict[str, str]:
    results = json.loads((folder / "results.json").read_text())
    frame = pd.read_csv(folder / "results.csv")
    summary = summarize_runs(frame)
    speed = pd.DataFrame(results["speed"]).set_index("block")
    return {"catalogue": render_catalogue(), "presets": render_presets(), "guidance": render_guidance(),
            "cost": render_cost(results), "table": render_table(summary, speed, "all"),
            "verdicts": render_verdicts(frame, summary), "fine": render_fine(results, summary, speed)}


def main(argv: list[str] | None = None) -> int:
    return markers.main(DOC, lambda _: render(), __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
