"""The fine-tuned rows of the embedding leaderboards: for each built-in table of pairs, ``poolkit compare`` with the
best frozen row of docs/embeddings/boards.json beside zero-shot mean, then ``finetune_top=1``: MiniLM fine-tuned
end to end (contrastively, the encoder as it came among the checkpoint candidates) with whichever of the two ranks
first, on the same 5 folds and seed as the frozen boards. Into docs/embeddings/finetuned.json;
``scripts/docs.py --write embeddings`` renders it into docs/embeddings.md.

    .venv/bin/python scripts/finetune_builtin.py      # about 45 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from poolkit.io import atomic_write_json
from poolkit.provenance import run_provenance
from poolkit.training.compare import compare

DOCS = Path(__file__).resolve().parent.parent / "docs" / "embeddings"
BOARDS, OUT = DOCS / "boards.json", DOCS / "finetuned.json"


def candidates(frozen: dict) -> list[str]:
    """The frozen board's best row (by mean) and zero-shot mean, once each: the rows fine-tuning chooses between."""
    best = min(frozen["rows"], key=lambda row: row["rank"])["pooler"]
    return list(dict.fromkeys([best, "mean"]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each fine-tuning (compare's default)")
    args = parser.parse_args(argv)
    committed = json.loads(BOARDS.read_text())
    seed, folds = committed["settings"]["seed"], committed["settings"]["folds"]
    boards, started = {}, time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="poolkit-finetuned-") as scratch:
        for data, frozen in committed["boards"].items():
            task, poolers = frozen["settings"]["task"], candidates(frozen)
            began = time.perf_counter()
            result = compare(data, task=task, poolers=poolers, folds=folds, seed=seed, finetune_top=1,
                             finetune_epochs=args.epochs, cache_dir=Path(scratch) / "cache",
                             out=Path(scratch) / task, progress=False, report=lambda line: print(line, flush=True))
            boards[data] = {"poolers": poolers, "settings": result.settings, "rows": result.rows,
                            "wall_seconds": time.perf_counter() - began}
    atomic_write_json(OUT, {"script": "scripts/finetune_builtin.py",
                            "settings": {"folds": folds, "seed": seed, "finetune_epochs": args.epochs},
                            "boards": boards, "seconds": time.perf_counter() - started,
                            "provenance": run_provenance()})
    print(f"wrote {OUT}: now run scripts/docs.py --write embeddings")


if __name__ == "__main__":
    main()
