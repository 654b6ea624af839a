"""Layers built on the poolers that are not poolers themselves: set-to-set attention (:mod:`.sets`) and losses that
supervise a pooled stage (:mod:`.losses`)."""

from .losses import AuxiliaryClassifiers
from .sets import ZonotopeSetAttention, tdof

__all__ = ["AuxiliaryClassifiers", "ZonotopeSetAttention", "tdof"]
