"""The zoo tour: encode a few sentences with the packaged all-MiniLM-L6-v2 and run every pooler on them."""

from __future__ import annotations

import statistics
import time

import torch
from rich.console import Console
from rich.table import Table

from .models.encoders import load_encoder, load_tokenizer
from .pooling import build_pooler, list_poolers

SENTENCES = [
    "A pooler turns many token vectors into one.",
    "Padding must never leak into the softmax.",
    "Weighted layer pooling mixes every hidden layer.",
    "short",
]


def run_zoo(model: str | None = None, sentences: list[str] | None = None, repeats: int = 20) -> list[dict]:
    """Every registered pooler on real MiniLM hidden states: name, output dim, parameters, and the median time of
    ``repeats`` calls at one torch thread (at the default thread count a small op's time is mostly threads waiting
    for each other, and it swings with whatever else the machine runs)."""
    sentences = sentences or SENTENCES
    tokenizer, encoder = load_tokenizer(model), load_encoder(model).eval()
    inputs = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.inference_mode():
        states = encoder(**inputs, output_hidden_states=True).hidden_states
    mask = inputs["attention_mask"]
    rows = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name in list_poolers():
            rows.append(_zoo_row(name, encoder.config, states, mask, repeats))
    finally:
        torch.set_num_threads(threads)
    return rows


def _zoo_row(name: str, config, states, mask, repeats: int) -> dict:
    """One pooler's zoo row: its shape, parameters, whether its output is finite, its median time per call."""
    pooler = build_pooler(name, config.hidden_size, config.num_hidden_layers).eval()
    calls = []
    with torch.inference_mode():
        pooled = pooler(states, mask)
        for _ in range(repeats):
            start = time.perf_counter()
            pooler(states, mask)
            calls.append(time.perf_counter() - start)
    return {"pooler": name, "kind": pooler.kind, "output_dim": pooler.output_dim,
            "params": sum(p.numel() for p in pooler.parameters()), "ms": statistics.median(calls) * 1e3,
            "finite": bool(torch.isfinite(pooled).all()), "shape": tuple(pooled.shape)}


def main() -> None:
    console = Console()
    rows = run_zoo()
    table = Table(title=f"poolkit: {len(rows)} poolers on all-MiniLM-L6-v2 hidden states "
                        f"({len(SENTENCES)} sentences)")
    for column in ("pooler", "kind", "output dim", "params", "ms / call (1 thread, median of 20)", "finite"):
        table.add_column(column, justify="left" if column in ("pooler", "kind") else "right")
    for row in rows:
        table.add_row(row["pooler"], row["kind"], str(row["output_dim"]), f"{row['params']:,}",
                      f"{row['ms']:.3f}", "yes" if row["finite"] else "NO")
    console.print(table)


if __name__ == "__main__":
    main()
