"""The embedding leaderboards of the built-in tables of pairs: ``poolkit compare --task retrieval|similarity`` with
the packaged all-MiniLM-L6-v2 frozen and compare's default poolers (zero-shot rows for the parameter-free ones,
contrastively trained rows for the others), 5 folds; then two checks: the cost of compare on 2,000 pairs with 5
poolers, encoding included (a fresh feature cache), and the retrieval set, one row per document, with its documents
shuffled among the rows (pairs with no signal) beside the chance level of random rankings. Into docs/embeddings/boards.json;
``scripts/docs.py --write embeddings`` renders docs/embeddings.md from it.

    .venv/bin/python scripts/compare_builtin.py      # about 15 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from poolkit.data.builtin import builtin_pairs
from poolkit.data.pairs import load_pairs
from poolkit.io import atomic_write_json
from poolkit.provenance import run_provenance
from poolkit.training.compare import compare
from poolkit.training.embedding_metrics import retrieval_metrics
from poolkit.training.inputs import DEFAULT_POOLERS

OUT = Path(__file__).resolve().parent.parent / "docs" / "embeddings" / "boards.json"
SETS = {"builtin:wordnet-examples": "retrieval", "builtin:wordnet-similarity": "similarity"}
FOLDS = 5
#: the cost check: the issue's "2,000 pairs with 5 poolers" (the similarity set has 2,000 pairs)
COST_SET, COST_POOLERS = "builtin:wordnet-similarity", ("mean", "cls", "max", "attention", "gated_attention")
#: the shuffled-pairs check: zero-shot mean and the learned poolers of the attention family
SHUFFLED_SET, SHUFFLED_POOLERS = "builtin:wordnet-examples", ("mean", "attention", "gated_attention", "latent")
CHANCE_DRAWS = 20


def board(data, task: str, poolers, cache_dir: Path, seed: int = 0) -> dict:
    """compare's leaderboard (settings and rows, as leaderboard.json holds them) and its wall time."""
    started = time.perf_counter()
    result = compare(data, task=task, poolers=list(poolers), folds=FOLDS, seed=seed, cache_dir=cache_dir,
                     progress=False, report=lambda line: print(line, flush=True))
    return {"settings": result.settings, "rows": result.rows, "wall_seconds": time.perf_counter() - started}


def shuffled_pairs(frame, seed: int):
    """One row per document (a document relevant to several queries would carry a signal that survives the shuffle:
    its popularity), then the documents shuffled among the rows: no query's document can be learned from others."""
    frame = frame.drop_duplicates("pair").reset_index(drop=True)
    frame["pair"] = np.random.default_rng(seed).permutation(frame["pair"].to_numpy())
    return frame


def chance(frame, draws: int, seed: int) -> dict:
    """nDCG@10 of random rankings of the whole table (random vectors), mean and sample std over ``draws``."""
    pairs = load_pairs(frame, "retrieval")
    generator = torch.Generator().manual_seed(seed)
    found = [retrieval_metrics(torch.randn(len(pairs.queries), 64, generator=generator),
                               torch.randn(len(pairs.corpus), 64, generator=generator), pairs.relevant)["ndcg@10"]
             for _ in range(draws)]
    return {"ndcg@10_mean": float(np.mean(found)), "ndcg@10_std": float(np.std(found, ddof=1)), "draws": draws}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the folds, the poolers and the shuffle")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="poolkit-boards-") as scratch:
        cache = Path(scratch) / "cache"
        boards = {data: board(data, task, DEFAULT_POOLERS, cache, args.seed) for data, task in SETS.items()}
        cost = board(COST_SET, SETS[COST_SET], COST_POOLERS, Path(scratch) / "fresh-cache", args.seed)
        frame = shuffled_pairs(builtin_pairs(SHUFFLED_SET)[0], args.seed)
        shuffled = board(frame, "retrieval", SHUFFLED_POOLERS, cache, args.seed)
    shuffled["chance"] = chance(frame, CHANCE_DRAWS, args.seed)
    atomic_write_json(OUT, {"script": "scripts/compare_builtin.py", "settings": {"folds": FOLDS, "seed": args.seed},
                            "boards": boards, "cost": {"data": COST_SET, **cost},
                            "shuffled": {"data": SHUFFLED_SET, **shuffled},
                            "seconds": time.perf_counter() - started, "provenance": run_provenance()})
    print(f"wrote {OUT}: now run scripts/docs.py --write embeddings")


if __name__ == "__main__":
    main()
