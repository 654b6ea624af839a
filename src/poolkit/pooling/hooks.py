"""Module hooks: where a pooler's folded forms give way to calling its layers as modules.

Poolers fold their layers into cheaper products (an attention's scoring layers into one matmul over the real
tokens, latent / adapool's key and value projections into the queries, a composite's parts called through
``pool``). A folded layer is never called, so hooks on it would not run: forward hooks that read or replace its
output (activation capture, attribution), forward pre-hooks that set its weight (``torch.nn.utils.prune``, the older
``weight_norm`` / ``spectral_norm``), backward hooks. Where a layer has a hook, its pooler calls it as a module
instead: the same values to float rounding, the hook runs, at the cost of the folding. ``Pooler.forward`` (and a
layer pooler, for its token pooler) then zeroes the padding first, so that no hooked layer reads it and the
non-finite guard never pools a second time. Under ``torch.func`` transforms and compile, ``lstm_layers`` /
``gru_layers`` unroll their recurrence from its weights (layers.final_state): hooks on ``rnn`` do not run there.
"""

from __future__ import annotations

from torch import nn
from torch.nn.modules import module as torch_module


def hooked(*layers: nn.Module | None) -> bool:
    """Whether a call of any of ``layers`` (None: skipped) or of a module inside one would run a hook: one of their
    own, or a global one (``nn.modules.module.register_module_forward_hook`` and the like). Attribute tests written
    out, not looped over names: this runs on every call of a pooler with folded layers."""
    if _global_hooks():
        return any(layer is not None for layer in layers)
    return any(_has_hooks(layer) for layer in layers if layer is not None)


def hooked_itself(layer: nn.Module) -> bool:
    """Whether a call of ``layer`` itself would run a hook (its own or a global one), whatever its submodules have:
    for a pooler used as a part, whose own ``pool`` honours its layers' hooks."""
    return _global_hooks() or _own_hooks(layer)


def _global_hooks() -> bool:
    return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks
                or torch_module._global_backward_hooks or torch_module._global_backward_pre_hooks)


def _own_hooks(layer: nn.Module) -> bool:
    return bool(layer._forward_hooks or layer._forward_pre_hooks or layer._backward_hooks
                or layer._backward_pre_hooks)


def _has_hooks(layer: nn.Module) -> bool:
    """Hooks of ``layer``'s own or of a module inside it."""
    return _own_hooks(layer) or any(_has_hooks(inner) for inner in layer._modules.values() if inner is not None)
