"""The shuffled-pairs control of docs/embeddings.md over several shuffles: `builtin:wordnet-examples` cut to one row
per document, its documents shuffled among the rows with each seed, `compare` (5 folds, fold seed 0) with zero-shot
mean and two learned poolers, beside the chance level of random rankings of the same table. One shuffle is a weak
control (the committed board's is seed 0); this gives each pooler's spread over shuffles, and the page tests each
against chance, paired by shuffle. Into docs/embeddings/shuffled-seeds.json; ``scripts/docs.py --write embeddings``.

    .venv/bin/python scripts/shuffled_seeds.py      # about 10 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from compare_builtin import CHANCE_DRAWS, FOLDS, SHUFFLED_SET, chance, shuffled_pairs

from poolkit.data.builtin import builtin_pairs
from poolkit.io import atomic_write_json
from poolkit.provenance import run_provenance
from poolkit.training.compare import compare

OUT = Path(__file__).resolve().parent.parent / "docs" / "embeddings" / "shuffled-seeds.json"
POOLERS = ("mean", "gated_attention", "latent")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shuffles", type=int, default=5, help="shuffle seeds 0 .. N-1")
    args = parser.parse_args(argv)
    started, runs = time.perf_counter(), []
    with tempfile.TemporaryDirectory(prefix="poolkit-shuffled-") as scratch:
        for seed in range(args.shuffles):
            frame = shuffled_pairs(builtin_pairs(SHUFFLED_SET)[0], seed)
            board = compare(frame, task="retrieval", poolers=list(POOLERS), folds=FOLDS, seed=0,
                            cache_dir=Path(scratch) / "cache", progress=False)
            runs.append({"shuffle": seed, "chance": chance(frame, CHANCE_DRAWS, seed),
                         "rows": {row["pooler"]: {"mean": row["mean"], "fold_metrics": row["fold_metrics"],
                                                  "best_epochs": [f["best_epoch"] for f in row["fold_detail"]]}
                                  for row in board.rows}})
            print(seed, {name: round(row["mean"], 4) for name, row in runs[-1]["rows"].items()}, flush=True)
    atomic_write_json(OUT, {"script": "scripts/shuffled_seeds.py", "data": SHUFFLED_SET, "folds": FOLDS,
                            "poolers": list(POOLERS), "runs": runs, "seconds": time.perf_counter() - started,
                            "provenance": run_provenance()})
    print(f"wrote {OUT}: now run scripts/docs.py --write embeddings")


if __name__ == "__main__":
    main()
