"""docs/scale.md's numbers, rendered from benchmarks/results/scale.json (written by
``benchmarks/perf_scale.py --json``).
"""

from __future__ import annotations

from rendering import ROOT, Page, read_json, table

from pages.benchmarks_compare import provenance

RESULT = ROOT / "benchmarks" / "results" / "scale.json"


def render_provenance(result: dict) -> str:
    options = result["options"]
    took = (f"The whole run took {result['total_s'] / 60:.1f} min." if result["complete"] else
            f"The run was STOPPED after {result['total_s'] / 60:.1f} min, before it finished: the parts it did not "
            "reach are marked as not measured.")
    return (provenance(result, "benchmarks/results/scale.json")
            + f" {took} Settings: window {result['window']} rows, MiniLM N = {options['minilm_n']}, tiny BERT N = "
            f"{options['tiny_n']} (batch {options['tiny_batch_size']}).")


def render_embed(result: dict) -> str:
    rows = [[cell["model"], f"{cell['n']:,}", f"{cell['wall_s']:.1f}", f"{cell['cpu_s']:.1f}",
             f"{cell['texts_per_s']:,.0f}", f"{cell['peak_rss_mib']:,.0f}"] for cell in result["scaling"]]
    lines = [table(["model", "N", "wall s", "CPU s", "texts/s", "peak RSS MiB"], rows, align="lrrrrr"), ""]
    for model in dict.fromkeys(cell["model"] for cell in result["scaling"]):
        cells = [c for c in result["scaling"] if c["model"] == model and c["n"] >= 10_000]
        if len(cells) < 2:
            continue
        rss = [c["peak_rss_mib"] for c in cells]
        speed = [c["texts_per_s"] for c in cells]
        # between consecutive N the start-up (imports, model load, hashing the model) cancels out
        marginal = [(b["n"] - a["n"]) / (b["wall_s"] - a["wall_s"]) for a, b in zip(cells, cells[1:])]
        last = cells[-2:]
        lines.append(f"- {model}, N = {cells[0]['n']:,} to {cells[-1]['n']:,}: peak RSS from {min(rss):,.0f} to "
                     f"{max(rss):,.0f} MiB ({apart(rss)} apart; goal: within 10%), and from "
                     f"{last[0]['peak_rss_mib']:,.0f} to {last[1]['peak_rss_mib']:,.0f} MiB between the two largest N "
                     f"({apart(rss[-2:])}). Texts/s "
                     f"from {min(speed):,.0f} to {max(speed):,.0f} ({apart(speed)} apart; goal: flat); start-up "
                     "is part of each cell's wall time, so small N look slower. Between consecutive N: "
                     + ", ".join(f"{m:,.0f}" for m in marginal) + f" texts/s ({apart(marginal)} apart).")
    return "\n".join(lines)


def apart(values: list[float]) -> str:
    """How far apart the largest and smallest of positive ``values`` are, e.g. '12%'."""
    return f"{(max(values) / min(values) - 1) * 100:.0f}%"


def render_processes(result: dict) -> str:
    runs = result["processes"]["runs"]
    base = runs["1 process, 1 thread"]["wall_s"]
    rows = table(["run", "wall s (start-up included)", "texts/s", "speed-up vs 1 process, 1 thread"],
                 [[name, f"{run['wall_s']:.1f}", f"{run['texts_per_s']:.0f}", f"{base / run['wall_s']:.2f}x"]
                  for name, run in runs.items()], align="lrrr")
    return (rows + f"\n\nN = {result['processes']['n']:,} glosses, {result['processes']['model']}; the two "
            f"outputs differ by at most {result['processes']['max_abs_difference']:.1e} (absolute).")


def render_cache(result: dict) -> str:
    cap = result["cache"][0]["token_cap"]
    rows = [[cell["model"], f"{cell['layers']} x {cell['hidden_size']}", f"{cell['tokens_per_text']:.1f}",
             f"{cell['full_bytes_per_text'] / 1024:,.1f} KiB", f"{cell['lean_bytes_per_text'] / 1024:,.1f} KiB",
             f"{cell['full_bytes_per_text'] / cell['lean_bytes_per_text']:.1f}x",
             f"{cell['lean_int8_bytes_per_text'] / 1024:,.1f} KiB", f"{cell['lean_capped_bytes_per_text'] / 1024:,.1f} KiB",
             f"{cell['full_bytes_at_100_tokens'] / 1024:,.0f} KiB", f"{cell['lean_bytes_at_100_tokens'] / 1024:,.0f} KiB"]
            for cell in result["cache"]]
    rows = table(["model", "layers x hidden", "tokens per text", "before: bytes per text", "after", "before / after",
                  "after, int8 token states", f"after, first {cap} token states", "at 100 tokens per text: before",
                  "after"], rows, align="llrrrrrrrr")
    plan = result["cache"][0]["lean_plan"]
    names = ", ".join(s["name"] for s in plan["summaries"])
    return (rows + f"\n\nAfter: per-layer summaries of {names}, and token states of the "
            f"{plan['token_layers']} layer(s), for compare's default poolers and the linear baseline; "
            f"{result['cache'][0]['texts']} embedded WordNet glosses, max_length 256.")


def render_leaderboard(result: dict) -> str:
    board = result["leaderboard"]
    boards, metric = board["boards"], board["metric"]
    names = list(boards)
    rows = table(["pooler", *(f"{name}: {metric} (± fold std)" for name in names)],
                 [[label, *(f"{boards[n][label]['mean']:.4f} ± {boards[n][label]['std']:.4f}" for n in names)]
                  for label in boards["full"]], align="l" + "r" * len(names))
    lines = [f"{board['rows']} rows of builtin:embedded, {board['folds']} folds, {board['epochs']} epochs, the same "
             "folds and seeds on every cache, best first."]
    for name in names[1:]:
        change = {p: boards[name][p]["mean"] - boards["full"][p]["mean"] for p in boards["full"]}
        worst = max(map(abs, change.values()))
        moved = {way: [p for p, d in change.items() if abs(d) >= 5e-5 and (d > 0) == (way == "higher")]
                 for way in ("higher", "lower")}  # differences that show at four decimals
        moved = "; ".join(f"{way} for {', '.join(names) or 'none'}" for way, names in moved.items())
        same = list(boards[name]) == list(boards["full"])
        lines.append(f"{name}: largest difference from the full cache {worst:.4f}"
                     + (f" ({moved})" if worst >= 5e-5 else "") + "; ranking "
                     + ("the same." if same else f"DIFFERENT ({', '.join(boards[name])})."))
    return rows + "\n\n" + " ".join(lines)


def render_quantisation(result: dict) -> str:
    found = result["quantisation"]
    rows = table(["layer", "int8: relative error", "float8 e4m3: relative error", "float8 / int8"],
                 [[cell["layer"], f"{cell['int8']:.4f}", f"{cell['float8_e4m3']:.4f}",
                   f"{cell['float8_e4m3'] / cell['int8']:.2f}x"] for cell in found["layers"]], align="rrrr")
    ratios = [cell["float8_e4m3"] / cell["int8"] for cell in found["layers"]]
    return (rows + f"\n\n{found['model']}, the {found['tokens']:,} real tokens of {found['texts']} embedded "
            "WordNet glosses (layer 0: the embeddings); the mean over tokens of |stored - float16| / |float16| (L2 "
            f"norms of each token vector). float8's error is {min(ratios):.2f}x to {max(ratios):.2f}x int8's, at the "
            f"same byte per value and scale per vector; float8 is the more accurate on {sum(r < 1 for r in ratios)} of "
            f"{len(ratios)} layers.")


NOT_MEASURED = "Not measured: the committed run stopped before this part (see Provenance)."


def render() -> dict[str, str]:
    result = read_json(RESULT)
    parts = {"embed": ("scaling", render_embed), "processes": ("processes", render_processes),
             "cache": ("cache", render_cache), "quantisation": ("quantisation", render_quantisation),
             "leaderboard": ("leaderboard", render_leaderboard)}
    blocks = {name: draw(result) if result.get(key) else NOT_MEASURED for name, (key, draw) in parts.items()}
    return {"provenance": render_provenance(result), **blocks}


PAGE = Page("docs/scale.md", render)
