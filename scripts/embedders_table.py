"""What pooling, a prompt, Matryoshka truncation and quantised vectors do to retrieval on the packaged
all-MiniLM-L6-v2: ``poolkit evaluate`` on ``builtin:wordnet-examples`` for mean / cls / last / weighted_mean, each
without a prompt, with a query instruction pooled, and with it kept out of the pool (``include_prompt=False``);
mean also at its first 64 / 128 / 256 dimensions and for each quantisation kind with and without rescoring; into
docs/embedders/table.json (``scripts/docs.py --write embedders`` renders docs/embedders.md from it).

    .venv/bin/python scripts/embedders_table.py      # about 4 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from poolkit.io import atomic_write_json
from poolkit.provenance import run_provenance
from poolkit.training.evaluation import evaluate

OUT = Path(__file__).resolve().parent.parent / "docs" / "embedders" / "table.json"
DATA = "builtin:wordnet-examples"
POOLERS = ("mean", "cls", "last", "weighted_mean")
#: BGE's query instruction: a real retrieval prompt, which MiniLM was not trained with
PROMPT = "Represent this sentence for searching relevant passages: "
DIMS = (64, 128, 256)
KINDS = ("int8", "uint8", "binary", "ubinary")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=32, help="texts per batch (default 32)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = []
    for pooler in POOLERS:
        for prompt, include in ((None, None), (PROMPT, True), (PROMPT, False)):
            extra = {"dims": DIMS, "quantize": KINDS} if pooler == "mean" and prompt is None else {}
            settings = {} if include is None else {"include_prompt": include}
            result = evaluate(DATA, "retrieval", pooler=pooler, query_prompt=prompt, batch_size=args.batch_size,
                              progress=False, **settings, **extra)
            rows.append({"prompt": prompt, "include_prompt": include, **result})  # result["pooler"]: its spec
            print(f"{pooler} prompt={prompt is not None} include={include}: {result['metrics']['ndcg@10']:.4f}",
                  flush=True)
    atomic_write_json(OUT, {"script": "scripts/embedders_table.py", "data": DATA, "prompt": PROMPT,
                            "settings": {"batch_size": args.batch_size}, "rows": rows,
                            "seconds": time.perf_counter() - started, "provenance": run_provenance()})
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
