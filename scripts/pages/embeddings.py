"""docs/embeddings.md's numbers, rendered from docs/embeddings/zero-shot.json (``scripts/evaluate_builtin.py``)."""

from __future__ import annotations

from rendering import ROOT, Page, read_json, table

RESULT = ROOT / "docs" / "embeddings" / "zero-shot.json"
METRICS = {"retrieval": ("ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10"),
           "similarity": ("spearman", "pearson")}
#: the figure each task's leaderboard ranks by
MAIN = {"retrieval": "ndcg@10", "similarity": "spearman"}


def ours(results: list[dict], task: str) -> list[dict]:
    return [r for r in results if r["task"] == task and "by" not in r]


def render_setup(result: dict) -> str:
    prov, runs = result["provenance"], ours(result["results"], "retrieval")[0]
    sizes = {r["data"]: (f"{r['queries']:,} queries, {r['corpus']:,} documents" if r["task"] == "retrieval" else
                         f"{r['pairs']:,} pairs") for r in result["results"] if "by" not in r}
    return (f"Made by `{result['script']}` (`docs/embeddings/zero-shot.json`): `poolkit evaluate` with the packaged "
            f"all-MiniLM-L6-v2 (max length {runs['max_length']}, batch {result['settings']['batch_size']}) and each "
            f"parameter-free pooler, no training; " + "; ".join(f"`{d}`: {s}" for d, s in sizes.items())
            + f". The whole run took {result['seconds'] / 60:.1f} minutes. Commit "
            f"{(prov.get('commit') or 'unknown')[:10]}, torch {prov['torch']}, {prov['cpu']} ({prov['cores']} cores).")


def render_task(result: dict, task: str) -> str:
    rows = sorted(ours(result["results"], task), key=lambda r: -r["metrics"][MAIN[task]])
    return table(["pooler", *METRICS[task]], [[f"`{r['pooler']['name']}`", *(f"{r['metrics'][m]:.4f}"
                                                                           for m in METRICS[task])] for r in rows],
                 align="l" + "r" * len(METRICS[task]))


def render_parity(result: dict) -> str:
    lines = []
    for task in METRICS:
        mine = next(r for r in ours(result["results"], task) if r["pooler"]["name"] == "mean")
        theirs = next(r for r in result["results"] if r["task"] == task and r.get("by") == "sentence-transformers")
        largest = max(abs(mine["metrics"][m] - theirs["metrics"][m]) for m in METRICS[task])
        lines.append([mine["data"], MAIN[task], f"{mine['metrics'][MAIN[task]]:.4f}",
                      f"{theirs['metrics'][MAIN[task]]:.4f}", f"{largest:.1e} ({len(METRICS[task])} metrics)"])
    return table(["data", "metric", "poolkit evaluate", "sentence-transformers", "largest difference, every metric"],
                 lines, align="llrrr")


def render_reading(result: dict) -> str:
    lines = []
    for task in METRICS:
        rows = sorted(ours(result["results"], task), key=lambda r: -r["metrics"][MAIN[task]])
        best, worst = rows[0], rows[-1]
        mean = next(r for r in rows if r["pooler"]["name"] == "mean")
        shown = {r["pooler"]["name"]: {m: round(v, 4) for m, v in r["metrics"].items()} for r in rows}  # as printed
        alike = [name for name in shown if name != "mean" and shown[name] == shown["mean"]]
        lines.append(f"- **{task}** (`{best['data']}`): `{best['pooler']['name']}` is first by {MAIN[task]} "
                     f"({best['metrics'][MAIN[task]]:.4f}), `{worst['pooler']['name']}` last "
                     f"({worst['metrics'][MAIN[task]]:.4f}); mean pooling, the checkpoint's own, "
                     + ("is the best" if shown[best["pooler"]["name"]] == shown["mean"] else
                        f"is {best['metrics'][MAIN[task]] - mean['metrics'][MAIN[task]]:.4f} below the best")
                     + (f"; {', '.join(f'`{n}`' for n in alike)} scores exactly as mean (a text's vector scaled by a "
                        "number of its own: the cosine does not change)." if alike else "."))
    return "\n".join(lines)


def render() -> dict[str, str]:
    result = read_json(RESULT)
    return {"setup": render_setup(result), "retrieval": render_task(result, "retrieval"),
            "similarity": render_task(result, "similarity"), "parity": render_parity(result),
            "reading": render_reading(result)}


PAGE = Page("docs/embeddings.md", render)
