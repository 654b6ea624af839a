"""Encoder + pooler + head models (Hugging Face) and the sentence-transformers module."""

from ..extras import require

require("hf", "transformers", "safetensors", "tqdm")  # accelerate: training only

from .pooled_model import PooledConfig, PooledModel, PooledModelOutput  # noqa: E402

__all__ = ["PooledConfig", "PooledModel", "PooledModelOutput"]
