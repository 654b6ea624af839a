"""Encoder + pooler + head models (Hugging Face) and the sentence-transformers module. The model classes load
transformers when first used, so that the light modules here (heads, encoders' names) do not."""

import importlib

from ..extras import require

require("hf", "transformers", "safetensors", "tqdm")  # accelerate: training only

__all__ = ["PooledConfig", "PooledModel", "PooledModelOutput"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.pooled_model"), name)
