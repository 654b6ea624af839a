"""poolkit: pooling for transformers and CNNs that is correct under padding and dtypes."""

from .errors import PoolkitError
from .pooling import Pooler, get_pooler, list_poolers, pooler_options, register_pooler


def __getattr__(name: str):
    """``poolkit.TextEncoder`` / ``poolkit.encode`` import transformers only when first used."""
    if name in ("TextEncoder", "encode"):
        from .models import text_encoder

        return getattr(text_encoder, name)
    raise AttributeError(f"module 'poolkit' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = ["Pooler", "PoolkitError", "TextEncoder", "encode", "get_pooler", "list_poolers", "pooler_options",
           "register_pooler", "__version__"]
