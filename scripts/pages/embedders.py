"""docs/embedders.md's numbers, rendered from docs/embedders/parity.json (``scripts/declared_parity.py``) and
docs/embedders/table.json (``scripts/embedders_table.py``)."""

from __future__ import annotations

from rendering import ROOT, Page, made_at, read_json, table

RESULT = ROOT / "docs" / "embedders" / "parity.json"
TABLE = ROOT / "docs" / "embedders" / "table.json"
METRIC = "ndcg@10"
#: the largest difference to sentence-transformers' vectors the held-out check accepts, per case
PARITY = 1e-5


def render_setup(result: dict) -> str:
    prov = result["provenance"]
    return (f"Made by `{result['script']}` (`docs/embedders/parity.json`): {result['texts']:,} texts of "
            f"`{result['data']}` encoded by sentence-transformers {result['sentence_transformers']} "
            "(`SentenceTransformer(folder).encode`) and by `poolkit.encode(texts, model=folder)`, whose default for "
            "such a folder is its declared pooling (`pooler=\"auto\"`); the folders are built by sentence-transformers "
            f"from the packaged all-MiniLM-L6-v2 (Dense layers seeded). The run took {result['seconds']:.0f} s. "
            f"Commit {made_at(prov)}.")


def render_parity(result: dict) -> str:
    rows = [[case["case"], f"`{case['pooling']}`", f"{case['max_abs_diff']:.1e}",
             "passes" if case["max_abs_diff"] <= PARITY else "**fails**"] for case in result["cases"]]
    return table(["folder", "poolkit's pooling", "max abs difference", f"<= {PARITY:.0e}"], rows, align="llrl")


def _row(results: dict, pooler: str, include: bool | None) -> dict:
    return next(r for r in results["rows"] if r["pooler"]["name"] == pooler and r["include_prompt"] == include)


def render_table_setup(results: dict) -> str:
    prov, first = results["provenance"], results["rows"][0]
    return (f"Made by `{results['script']}` (`docs/embedders/table.json`): `poolkit evaluate` on `{results['data']}` "
            f"({first['queries']:,} queries ranked against {first['corpus']:,} documents) with the packaged "
            f"all-MiniLM-L6-v2 (max length {first['max_length']}), each pooler given by name (no training). The "
            f"prompt is a query instruction, `{results['prompt'].strip()}`, before the queries only (the documents go "
            f"without), which MiniLM was not trained with. The run took {results['seconds'] / 60:.1f} minutes. Commit "
            f"{made_at(prov)}.")


def render_prompts(results: dict) -> str:
    poolers = list(dict.fromkeys(r["pooler"]["name"] for r in results["rows"]))
    rows = []
    for pooler in poolers:
        plain, pooled, left_out = (_row(results, pooler, include)["metrics"][METRIC] for include in (None, True, False))
        rows.append([f"`{pooler}`", f"{plain:.4f}", f"{pooled:.4f} ({pooled - plain:+.4f})",
                     f"{left_out:.4f} ({left_out - plain:+.4f})"])
    return table_of(["pooler", f"{METRIC}, no prompt", "prompt pooled", "prompt kept out of the pool"], rows)


def render_dims(results: dict) -> str:
    mean = _row(results, "mean", None)
    rows = [[str(r["dim"]), f"{r['metrics'][METRIC]:.4f}"] for r in mean["by_dim"]]
    rows.append([f"{mean['pooler']['hidden_size']} (all)", f"{mean['metrics'][METRIC]:.4f}"])
    return table_of(["first dims", f"`mean` {METRIC}"], rows)


def render_quantized(results: dict) -> str:
    mean = _row(results, "mean", None)
    full = mean["metrics"][METRIC]
    rows = [["float32", f"{full:.4f}", "-"]]
    for r in mean["by_quantize"]:
        rows.append([r["kind"], f"{r['metrics'][METRIC]:.4f} ({r['metrics'][METRIC] - full:+.4f})",
                     f"{r['rescored'][METRIC]:.4f} ({r['rescored'][METRIC] - full:+.4f})"])
    rescore = mean["by_quantize"][0]["rescore"]
    return table_of(["vectors", f"`mean` {METRIC}, codes only", f"top {rescore} x 100 rescored in float32"], rows)


def table_of(header: list[str], rows: list[list[str]]) -> str:
    return table(header, rows, align="l" + "r" * (len(header) - 1))


def render() -> dict[str, str]:
    result, results = read_json(RESULT), read_json(TABLE)
    return {"setup": render_setup(result), "parity": render_parity(result), "table-setup": render_table_setup(results),
            "prompts": render_prompts(results), "dims": render_dims(results), "quantized": render_quantized(results)}


PAGE = Page("docs/embedders.md", render)
