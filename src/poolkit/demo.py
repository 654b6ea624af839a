"""The zoo tour: encode a few sentences with the packaged all-MiniLM-L6-v2 and run every pooler on them."""

from __future__ import annotations

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
    """Every registered pooler on real MiniLM hidden states: name, output dim, parameters, time per call."""
    sentences = sentences or SENTENCES
    tokenizer, encoder = load_tokenizer(model), load_encoder(model).eval()
    inputs = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.inference_mode():
        states = encoder(**inputs, output_hidden_states=True).hidden_states
    mask = inputs["attention_mask"]
    rows = []
    for name in list_poolers():
        pooler = build_pooler(name, encoder.config.hidden_size, encoder.config.num_hidden_layers).eval()
        with torch.inference_mode():
            pooled = pooler(states, mask)
            start = time.perf_counter()
            for _ in range(repeats):
                pooler(states, mask)
            seconds = (time.perf_counter() - start) / repeats
        rows.append({"pooler": name, "kind": pooler.kind, "output_dim": pooler.output_dim,
                     "params": sum(p.numel() for p in pooler.parameters()), "ms": seconds * 1e3,
                     "finite": bool(torch.isfinite(pooled).all()), "shape": tuple(pooled.shape)})
    return rows


def main() -> None:
    console = Console()
    rows = run_zoo()
    table = Table(title=f"poolkit: {len(rows)} poolers on all-MiniLM-L6-v2 hidden states "
                        f"({len(SENTENCES)} sentences)")
    for column in ("pooler", "kind", "output dim", "params", "ms / call", "finite"):
        table.add_column(column, justify="left" if column in ("pooler", "kind") else "right")
    for row in rows:
        table.add_row(row["pooler"], row["kind"], str(row["output_dim"]), f"{row['params']:,}",
                      f"{row['ms']:.3f}", "yes" if row["finite"] else "NO")
    console.print(table)


if __name__ == "__main__":
    main()
