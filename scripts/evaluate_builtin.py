"""Zero-shot embeddings on the built-in tables of pairs: ``poolkit evaluate`` with the packaged all-MiniLM-L6-v2 and
each parameter-free pooler (mean also at its first 64, 128 and 256 dimensions: Matryoshka truncation), and
sentence-transformers' own evaluators on the same model and pooling beside it (mean: the checkpoint's own pooling),
into docs/embeddings/zero-shot.json; ``scripts/docs.py --write embeddings`` renders
docs/embeddings.md from it.

    .venv/bin/python scripts/evaluate_builtin.py      # about 5 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from poolkit.data.pairs import load_pairs
from poolkit.io import atomic_write_json
from poolkit.models.encoders import resolve_model
from poolkit.provenance import run_provenance
from poolkit.training.evaluation import evaluate

OUT = Path(__file__).resolve().parent.parent / "docs" / "embeddings" / "zero-shot.json"
SETS = {"builtin:wordnet-examples": "retrieval", "builtin:wordnet-similarity": "similarity"}
POOLERS = ("mean", "cls", "max", "mean_sqrt_len")
#: mean pooling is also scored at these truncations (``evaluate(dims=...)``)
DIMS = (64, 128, 256)


def sentence_transformers_figures(data: str, task: str, batch_size: int) -> dict[str, float]:
    """What sentence-transformers' evaluator gives for the packaged model with its own (mean) pooling."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import (EmbeddingSimilarityEvaluator,
                                                                         InformationRetrievalEvaluator)
    from sentence_transformers.util import cos_sim

    model = SentenceTransformer(resolve_model(None), device="cpu")
    pairs = load_pairs(data, task)
    if task == "retrieval":
        found = InformationRetrievalEvaluator(
            {f"q{i}": q for i, q in enumerate(pairs.queries)}, {f"d{i}": d for i, d in enumerate(pairs.corpus)},
            {f"q{i}": {f"d{j}" for j in wanted} for i, wanted in enumerate(pairs.relevant)},
            score_functions={"cosine": cos_sim}, batch_size=batch_size, write_csv=False)(model)
        return {name: float(found[f"cosine_{name}"]) for name in ("ndcg@10", "mrr@10", "map@100", "recall@1",
                                                                  "recall@10")}
    found = EmbeddingSimilarityEvaluator(pairs.left, pairs.right, pairs.scores.tolist(), batch_size=batch_size,
                                         write_csv=False)(model)
    return {"spearman": float(found["spearman_cosine"]), "pearson": float(found["pearson_cosine"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=32, help="texts per batch (default 32)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = []
    for data, task in SETS.items():
        for pooler in POOLERS:
            result = evaluate(data, task, pooler=pooler, batch_size=args.batch_size, progress=False,
                              dims=DIMS if pooler == "mean" else None)
            results.append({"data": data, **result})
            print(data, pooler, result["metrics"], flush=True)
        results.append({"data": data, "task": task, "pooler": {"name": "mean"}, "by": "sentence-transformers",
                        "metrics": sentence_transformers_figures(data, task, args.batch_size)})
    atomic_write_json(OUT, {"script": "scripts/evaluate_builtin.py", "settings": {"batch_size": args.batch_size,
                                                                                 "poolers": list(POOLERS),
                                                                                 "dims": list(DIMS)},
                            "results": results, "seconds": time.perf_counter() - started,
                            "provenance": run_provenance()})
    print(f"wrote {OUT}: now run scripts/docs.py --write embeddings")


if __name__ == "__main__":
    main()
