"""poolkit: pooling for transformers and CNNs that is correct under padding and dtypes.

``import poolkit`` imports nothing heavy: each public name imports its module when first used (the poolers, blocks
and layers need only torch and numpy; the rest says which extra to install), so that ``poolkit --help`` starts
without torch.
"""

import importlib

from .errors import PoolkitError

#: The torch-only names, and the module each comes from.
_CORE = {
    **dict.fromkeys(["get_block", "list_blocks"], "poolkit.blocks"),
    **dict.fromkeys(["AuxiliaryClassifiers", "ZonotopeSetAttention", "tdof"], "poolkit.nn"),
    **dict.fromkeys(["Pooler", "get_pooler", "list_poolers", "pooler_options", "register_pooler"], "poolkit.pooling"),
    "trapezoid_weights": "poolkit.pooling.quadrature",
}
#: Names that need an extra, and the module each comes from.
_LAZY = {
    "TextEncoder": "poolkit.models.text_encoder",
    "encode": "poolkit.models.text_encoder",
    "PooledModel": "poolkit.models.pooled_model",
    "PooledConfig": "poolkit.models.pooled_model",
    "compare": "poolkit.training.api",
    "evaluate": "poolkit.training.evaluation",
    "train": "poolkit.training.api",
    "predict": "poolkit.training.api",
    "merge": "poolkit.training.merging",
    "quantize": "poolkit.quantization",
    "export_onnx": "poolkit.models.text_encoder",
}


def __getattr__(name: str):
    """The names of ``_CORE`` and ``_LAZY`` import their module (and its extra, or say which to install) only when
    first used."""
    if name in _CORE or name in _LAZY:
        return getattr(importlib.import_module({**_CORE, **_LAZY}[name]), name)
    raise AttributeError(f"module 'poolkit' has no attribute {name!r}")


__version__ = "0.2.0"

__all__ = ["PoolkitError", *_CORE, *_LAZY, "__version__"]
