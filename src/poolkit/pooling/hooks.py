"""Module hooks: where a pooler's folded forms give way to calling its layers as modules.

Poolers fold their layers into cheaper products (an attention's scoring layers into one matmul over the real
tokens, latent / adapool's key and value projections into the queries, a composite's parts called through
``pool``). A folded layer is never called, so hooks on it would not run: forward hooks that read or replace its
output (activation capture, attribution), forward pre-hooks that set its weight (``torch.nn.utils.prune``, the older
``weight_norm`` / ``spectral_norm``), backward hooks. Where a layer has a hook, its pooler calls it as a module
instead: the same values to float rounding, the hook runs, at the cost of the folding.
"""

from __future__ import annotations

from torch import nn

#: The hook registries a module call runs, its own and the global ones.
_REGISTRIES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def hooked(*layers: nn.Module | None) -> bool:
    """Whether a call of any of ``layers`` (None: skipped) or of a module inside one would run a hook: one of their
    own, or a global one (``nn.modules.module.register_module_forward_hook`` and the like)."""
    if any(getattr(nn.modules.module, "_global" + name) for name in _REGISTRIES):
        return any(layer is not None for layer in layers)
    return any(getattr(module, name) for layer in layers if layer is not None
               for module in layer.modules() for name in _REGISTRIES)


def hooked_itself(layer: nn.Module) -> bool:
    """Whether a call of ``layer`` itself would run a hook (its own or a global one), whatever its submodules have:
    for a pooler used as a part, whose own ``pool`` honours its layers' hooks."""
    return any(getattr(layer, name) or getattr(nn.modules.module, "_global" + name) for name in _REGISTRIES)
