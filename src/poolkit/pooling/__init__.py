"""The pooling zoo: every pooler registered by name behind one contract (see base.Pooler)."""

from . import statistics, attention, composite, spatial, layers, sets  # noqa: F401,I001  (registers, in this order)
from .base import (Pooler, build_pooler, describe_options, get_pooler, list_poolers, pooler_options, pooler_spec,
                   register_pooler)
from .spatial import AuxiliaryClassifiers

__all__ = ["AuxiliaryClassifiers", "Pooler", "build_pooler", "describe_options", "get_pooler", "list_poolers",
           "pooler_options", "pooler_spec", "register_pooler"]
