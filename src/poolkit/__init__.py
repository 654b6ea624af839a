"""poolkit: pooling for transformers and CNNs that is correct under padding and dtypes.

``import poolkit`` needs only torch and numpy; the names that need an extra import it when first used.
"""

import importlib

from .blocks import get_block, list_blocks
from .errors import PoolkitError
from .nn import AuxiliaryClassifiers, ZonotopeSetAttention, tdof
from .pooling import Pooler, get_pooler, list_poolers, pooler_options, register_pooler
from .pooling.quadrature import trapezoid_weights

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
    "export_onnx": "poolkit.models.onnx_graph",
}


def __getattr__(name: str):
    """The names of ``_LAZY`` import their module (and its extra, or say which to install) only when first used."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'poolkit' has no attribute {name!r}")


__version__ = "0.2.0"

__all__ = ["AuxiliaryClassifiers", "Pooler", "PoolkitError", "ZonotopeSetAttention", "get_block", "get_pooler",
           "list_blocks", "list_poolers", "pooler_options", "register_pooler", "tdof", "trapezoid_weights", *_LAZY,
           "__version__"]
