"""Item 2: poolkit against what users have today, measured side by side in one run.

The seed snippets in their published form (``benchmarks/snippets.py``: mean, max, Learned Attention
Pooling, Attention Head, Weighted Layer Pooling, LSTM over layers) and sentence-transformers' ``Pooling``
module, each against the poolkit pooler doing the same job (same sizes, same padding). Reported: the
speed-up, snippet time / poolkit time (target >= 1.0 everywhere; weighted layers + CLS >= 100x at T = 256
in the forward pass: with backward, both sides must write the dense gradient of all 13 hidden states).

Layer snippets are timed as the notebook runs them, ``torch.stack(outputs.hidden_states)`` included;
poolkit gets the tuple of hidden states the model returns. The LSTM comparison uses the snippet's
shape (one direction, hidden 256, layers 1..12); poolkit's default is bidirectional.

    .venv/bin/python benchmarks/perf_snippets.py          # quick: T = 256, D = 768, fp32, fwd and fwd+bwd
    .venv/bin/python benchmarks/perf_snippets.py --full   # also T = 128, D = 384
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import snippets  # noqa: E402
from perf_common import (describe, interleaved, median_ms, parse_and_setup, per_repeat, ratio, save_json,  # noqa: E402
                         table, timed_call)
from poolkit import get_pooler  # noqa: E402

BATCH, NUM_LAYERS = 32, 12


def st_pooling(dim: int, mode: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from sentence_transformers.sentence_transformer.modules import Pooling
        except ImportError:
            from sentence_transformers.models import Pooling
    return Pooling(dim, pooling_mode=mode)


def pairs(dim: int, device: torch.device):
    """(label, target speed-up, snippet callable(states, mask), poolkit callable(states, mask), needs all layers)."""
    torch.manual_seed(0)
    out = []

    def token(label, snippet_fn, name, **options):
        pooler = get_pooler(name, hidden_size=dim, **options).to(device)
        out.append((label, 1.0, snippet_fn, lambda states, mask, p=pooler: p(states[-1], mask), False))

    mean_s, max_s = snippets.MeanPooling(), snippets.MaxPooling()
    attn_s = snippets.AttentionPooling(dim).to(device)
    head_s = snippets.AttentionHead(dim, dim).to(device)
    token("mean: MeanPooling snippet", lambda s, m: mean_s(s[-1], m), "mean")
    token("max: MaxPooling snippet (-1e4 fill)", lambda s, m: max_s(s[-1], m), "max")
    token("attention: Learned Attention Pooling snippet", lambda s, m: attn_s(s[-1], m), "attention")
    token("attention_head: Attention Head snippet (no mask)", lambda s, m: head_s(s[-1]), "attention_head")
    for mode, name in (("mean", "mean"), ("max", "max"), ("cls", "cls"), ("mean_sqrt_len_tokens", "mean_sqrt_len")):
        module = st_pooling(dim, mode).to(device)
        token(f"{name}: sentence-transformers Pooling('{mode}')",
              lambda s, m, mod=module: mod({"token_embeddings": s[-1], "attention_mask": m})["sentence_embedding"],
              name)
    weighted_s = snippets.WeightedLayerPooling(NUM_LAYERS, layer_start=4).to(device)
    weighted = get_pooler("weighted_layer", hidden_size=dim, num_layers=NUM_LAYERS, layer_start=4,
                          token_pooler="cls").to(device)
    out.append(("weighted_layer + cls: Weighted Layer Pooling snippet, [:, 0]", 100.0,
                lambda s, m: snippets.weighted_layer_cls(weighted_s, s), lambda s, m: weighted(s, m), True))
    lstm_s = snippets.LSTMPooling(NUM_LAYERS, dim, 256).to(device)
    lstm = get_pooler("lstm_layers", hidden_size=dim, num_layers=NUM_LAYERS, rnn_hidden=256, bidirectional=False,
                      layer_start=1, token_pooler="cls").to(device)
    out.append(("lstm_layers (1 direction, 256): LSTM Pooling snippet", 1.0,
                lambda s, m: snippets.lstm_over_layers(lstm_s, s), lambda s, m: lstm(s, m), True))
    modules = [attn_s, head_s, weighted_s, lstm_s, weighted, lstm]
    return out, modules


def run_config(length: int, dim: int, mode: str, device: torch.device, repeats: int) -> list[dict]:
    gen = torch.Generator().manual_seed(length + dim)
    train = mode == "fwd+bwd"
    states = tuple(torch.randn(BATCH, length, dim, generator=gen).to(device).requires_grad_(train)
                   for _ in range(NUM_LAYERS + 1))
    lengths = torch.randint(length // 2, length + 1, (BATCH,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long().to(device)  # as tokenizers return it
    comparisons, modules = pairs(dim, device)
    for module in modules:
        module.train(train)
    params = [p for module in modules for p in module.parameters()]

    def wrap(fn, layers: bool):
        leaves = list(states) if layers else [states[-1]]
        return timed_call(lambda: fn(states, mask), train, leaves + params)

    rows = []
    for label, target, snippet_fn, poolkit_fn, layers in comparisons:
        if train:
            # The 100x target is the forward's: with backward, both sides write the dense gradient of all 13
            # hidden states (zeros but for the first token), which then dominates. Never slower still holds.
            target = 1.0
        # One comparison at a time (its two variants interleaved): the layer snippets' stacks are big.
        times = interleaved({"snippet": wrap(snippet_fn, layers), "poolkit": wrap(poolkit_fn, layers)}, device,
                            repeats=repeats)
        rows.append({"comparison": label, "T": length, "D": dim, "mode": mode, "target": target,
                     "speedup": ratio(times, "snippet", "poolkit"),
                     "per_repeat": per_repeat(times, "snippet", "poolkit"),
                     "snippet_ms": median_ms(times, "snippet"), "poolkit_ms": median_ms(times, "poolkit")})
        print(f"  {label:64s} T={length} D={dim} {mode:7s} {rows[-1]['speedup']:8.2f}x", flush=True)
    return rows


def render(rows: list[dict]) -> str:
    configs = list(dict.fromkeys((r["T"], r["D"], r["mode"]) for r in rows))
    labels = list(dict.fromkeys(r["comparison"] for r in rows))
    headers = ["poolkit pooler: against"] + [f"T{t} D{d} {m}" for t, d, m in configs] + ["target"]
    body = []
    for label in labels:
        cells, target = [], None
        for config in configs:
            row = next((r for r in rows if (r["T"], r["D"], r["mode"]) == config and r["comparison"] == label), None)
            if row is None:
                cells.append("-")
                continue
            target = row["target"]
            value = row["speedup"]
            cells.append((f"{value:.0f}x" if value >= 100 else f"{value:.2f}x") + ("" if value >= target else " *"))
        targets = {r["target"] for r in rows if r["comparison"] == label}
        body.append([label] + cells + [" / ".join(f">= {t:g}x" for t in sorted(targets, reverse=True))])
    return table(headers, body, title="Speed-up of poolkit over the snippet (snippet time / poolkit time; "
                                      "* = under target)")


def main(argv: list[str] | None = None) -> dict:
    args, device = parse_and_setup(__doc__, argv)
    repeats = args.repeats or (7 if args.full else 5)
    configs = [(256, 768, "fwd"), (256, 768, "fwd+bwd")]
    if args.full:
        configs = [(128, 384, "fwd"), (128, 384, "fwd+bwd")] + configs
    print(f"# poolkit vs the snippets and sentence-transformers Pooling ({describe(device)}), B={BATCH}, "
          f"{NUM_LAYERS + 1} hidden states, fp32, {repeats} interleaved repeats")
    rows = []
    for length, dim, mode in configs:
        rows += run_config(length, dim, mode, device, repeats)
    print(render(rows))
    result = {"device": describe(device), "repeats": repeats, "rows": rows}
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
