"""Encoder + pooler + head models (Hugging Face) and the sentence-transformers module."""

from .pooled_model import PooledConfig, PooledModel, PooledModelOutput

__all__ = ["PooledConfig", "PooledModel", "PooledModelOutput"]
