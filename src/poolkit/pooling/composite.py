"""Poolers made of poolers: ``concat`` puts any list of poolers side by side."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..errors import PoolkitError
from .base import Pooler
from .spec import build_pooler, register_pooler


@register_pooler("concat", "concatenate")
class ConcatPooler(Pooler):
    """Several poolers' outputs side by side: -> (B, sum of their output dims).

    e.g. ``get_pooler("concat", hidden_size=D, poolers=["attention_head", "mean"])``, the combination
    the Attention Head Pooling recipe recommends. Token weights are the mean of the parts' weights.
    Parts are token poolers (layer poolers take all hidden states and are composed the other way:
    give them a token pooler).
    """
    option_docs = {
        "poolers": "the token poolers (names or spec dicts) whose outputs are concatenated",
    }
    weight_meaning = "the mean of the concatenated poolers' weights"

    def __init__(self, hidden_size: int, *, poolers: list[str | dict[str, Any]] | None = None,
                 on_empty: str = "zeros") -> None:
        super().__init__(hidden_size, on_empty=on_empty)
        specs = poolers if poolers is not None else ["attention_head", "mean"]
        if not isinstance(specs, (list, tuple)) or not specs:
            raise PoolkitError(f"concat: poolers must be a non-empty list of pooler names or specs, got {specs!r}")
        self.parts = nn.ModuleList(build_pooler(spec, hidden_size) for spec in specs)
        layer_parts = [part.name for part in self.parts if part.kind != "token"]
        if layer_parts:
            raise PoolkitError(f"concat takes token poolers; {layer_parts} pool over layers: give them a "
                               "token_pooler instead")
        self.linear = all(part.linear for part in self.parts)
        self.reads_padding = any(part.reads_padding for part in self.parts)
        self.positional = any(part.positional for part in self.parts)  # flex: the map's size is passed on
        self.order_invariant = all(part.order_invariant for part in self.parts)
        self.output_dim = sum(part.output_dim for part in self.parts)

    def pool(self, x: Tensor, mask: Tensor, **where):
        results = [part.pool_as_part(x, mask, **(where if part.positional else {})) for part in self.parts]
        pooled = torch.cat([p.to(_parts_dtype(x)) for p, _ in results], dim=-1)
        weights = torch.stack([w.float() for _, w in results]).mean(dim=0)
        return pooled, weights

    def pool_without_weights(self, x: Tensor, mask: Tensor, **where) -> Tensor:
        pooled = [part.pool_as_part(x, mask, weights=False, **(where if part.positional else {}))
                  for part in self.parts]
        return torch.cat([p.to(_parts_dtype(x)) for p in pooled], dim=-1)


def _parts_dtype(x: Tensor) -> torch.dtype:
    """The dtype the parts' outputs are concatenated in: float32 at least."""
    return torch.promote_types(x.dtype, torch.float32) if x.dtype != torch.float64 else x.dtype
