"""docs/embedders.md's numbers, rendered from docs/embedders/parity.json (``scripts/declared_parity.py``)."""

from __future__ import annotations

from rendering import ROOT, Page, read_json, table

RESULT = ROOT / "docs" / "embedders" / "parity.json"
#: the largest difference to sentence-transformers' vectors the held-out check accepts, per case
PARITY = 1e-5


def render_setup(result: dict) -> str:
    prov = result["provenance"]
    return (f"Made by `{result['script']}` (`docs/embedders/parity.json`): {result['texts']:,} texts of "
            f"`{result['data']}` encoded by sentence-transformers {result['sentence_transformers']} "
            "(`SentenceTransformer(folder).encode`) and by `poolkit.encode(texts, model=folder)`, whose default for "
            "such a folder is its declared pooling (`pooler=\"auto\"`); the folders are built by sentence-transformers "
            f"from the packaged all-MiniLM-L6-v2 (Dense layers seeded). The run took {result['seconds']:.0f} s. "
            f"Commit {(prov.get('commit') or 'unknown')[:10]}, torch {prov['torch']}, {prov['cpu']} "
            f"({prov['cores']} cores).")


def render_parity(result: dict) -> str:
    rows = [[case["case"], f"`{case['pooling']}`", f"{case['max_abs_diff']:.1e}",
             "passes" if case["max_abs_diff"] <= PARITY else "**fails**"] for case in result["cases"]]
    return table(["folder", "poolkit's pooling", "max abs difference", f"<= {PARITY:.0e}"], rows, align="llrl")


def render() -> dict[str, str]:
    result = read_json(RESULT)
    return {"setup": render_setup(result), "parity": render_parity(result)}


PAGE = Page("docs/embedders.md", render)
