"""Shared builders for the pooling tests: poolers with test-sized options and inputs in either form."""

from __future__ import annotations

import torch

from poolkit.pooling.spec import get_pooler, list_poolers, pooler_class, pooler_options

HIDDEN = 16
NUM_LAYERS = 5  # transformer layers: 6 hidden states with the embeddings

ALL_POOLERS = list_poolers()
TOKEN_POOLERS = list_poolers("token")
LAYER_POOLERS = list_poolers("layer")
# Poolers whose output must not change when the real tokens of a row are permuted.
# Option variants that the contract suite checks like registered poolers: test id -> (name, options).
POOLER_VARIANTS = {**{f"attention[scorer={scorer}]": ("attention", {"scorer": scorer})
                      for scorer in ("linear", "bilinear", "glu")},
                   "gem[signed=False]": ("gem", {"signed": False})}  # the classic form: clamped at eps


def make_pooler(name: str, **options):
    """A pooler in eval mode, sized for tests (small attention sizes, num_layers where needed); ``name`` may be a
    key of POOLER_VARIANTS."""
    name, preset = POOLER_VARIANTS.get(name, (name, {}))
    options = {**preset, **options}
    accepted = pooler_options(name)
    if "num_layers" in accepted:
        options.setdefault("num_layers", NUM_LAYERS)
    if "attn_size" in accepted and name != "attention_head":
        options.setdefault("attn_size", 8)
    if "rnn_hidden" in accepted:
        options.setdefault("rnn_hidden", 8)
    if "num_latents" in accepted:
        options.setdefault("num_latents", 8)
    if "layer_start" in accepted and pooler_class(name).kind == "layer" and name != "weighted_layer":
        options.setdefault("layer_start", 1)
    pooler = get_pooler(name, hidden_size=HIDDEN, **options)
    if name == "zonotope_attention":  # it starts as attention (gates 0): checked with the gates a step would give
        torch.nn.init.normal_(pooler.values.gate.weight, std=0.5)
        torch.nn.init.normal_(pooler.values.gate.bias, std=0.5)
    return pooler.eval()


def random_layers(batch: int, length: int, generator=None, scale: float = 1.0) -> list[torch.Tensor]:
    return [torch.randn(batch, length, HIDDEN, generator=generator) * scale for _ in range(NUM_LAYERS + 1)]


def mask_from_lengths(lengths: list[int], length: int) -> torch.Tensor:
    return (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()


def states_for(pooler, layers: list[torch.Tensor]):
    """What the pooler is called with: all layers for layer poolers, the last one for token poolers."""
    return layers if pooler.kind == "layer" else layers[-1]


def to_left_padding(layers: list[torch.Tensor], lengths: list[int]):
    """Move every row's real tokens to the end (left padding); padded slots get other values."""
    length = layers[0].shape[1]
    out = []
    for h in layers:
        moved = torch.randn_like(h) * 3
        for row, n in enumerate(lengths):
            if n:
                moved[row, length - n:] = h[row, :n]
        out.append(moved)
    mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for row, n in enumerate(lengths):
        if n:
            mask[row, length - n:] = 1
    return out, mask


def pooled_only(result):
    return result[0] if isinstance(result, tuple) else result


#: The set poolers: those whose ``order_invariant`` says the order of the real tokens does not matter (the contract
#: suite checks both ways: these ignore a shuffle, the other token poolers do not).
SET_POOLERS = [name for name in TOKEN_POOLERS if make_pooler(name).order_invariant]
