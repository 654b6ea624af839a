"""poolkit: pooling for transformers and CNNs that is correct under padding and dtypes."""

from .errors import PoolkitError
from .pooling import Pooler, get_pooler, list_poolers, pooler_options, register_pooler

__version__ = "0.1.0"

__all__ = ["Pooler", "PoolkitError", "get_pooler", "list_poolers", "pooler_options", "register_pooler",
           "__version__"]
