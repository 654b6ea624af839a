"""The pooling zoo: every pooler registered by name behind one contract (see base.Pooler), and each pooler's class,
importable from here (``from poolkit.pooling import AttentionPooler``), PyG-style."""

from . import statistics, attention, composite, spatial, layers, sets  # noqa: F401,I001  (registers, in this order)
from .attention import (AdaptiveAttentionPooler, AttentionHeadPooler, AttentionPooler, GatedAttentionPooler,
                        LatentAttentionPooler, LatentDictionaryPooler, MultiHeadAttentionPooler)
from .base import Pooler
from .composite import ConcatPooler
from .layers import (AttentionLayersPooler, ConcatLayersPooler, GRULayersPooler, LayerPooler, LSTMLayersPooler,
                     MeanLayersPooler, WeightedLayerPooler)
from .sets import ZonotopeAttentionPooler
from .spatial import AvgMaxPooler, FlexPooler
from .spec import (build_pooler, describe_options, get_pooler, list_poolers, pooler_class, pooler_options, pooler_spec,
                   register_aliases, register_pooler)
from .statistics import (ClsPooler, GeMPooler, LastPooler, LSEPooler, MaxPooler, MeanMaxPooler, MeanPooler,
                         MeanSqrtLenPooler, MinPooler, SumPooler, WeightedMeanPooler)

__all__ = ["AdaptiveAttentionPooler", "AttentionHeadPooler", "AttentionLayersPooler", "AttentionPooler",
           "AvgMaxPooler", "ClsPooler", "ConcatLayersPooler", "ConcatPooler", "FlexPooler",
           "GRULayersPooler", "GatedAttentionPooler", "GeMPooler", "LSEPooler", "LSTMLayersPooler", "LastPooler",
           "LatentAttentionPooler", "LatentDictionaryPooler", "LayerPooler", "MaxPooler", "MeanLayersPooler",
           "MeanMaxPooler", "MeanPooler",
           "MeanSqrtLenPooler", "MinPooler", "MultiHeadAttentionPooler", "Pooler", "SumPooler", "WeightedLayerPooler",
           "WeightedMeanPooler",
           "ZonotopeAttentionPooler", "build_pooler", "describe_options", "get_pooler", "list_poolers", "pooler_class",
           "pooler_options", "pooler_spec", "register_aliases", "register_pooler"]
