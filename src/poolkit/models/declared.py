"""The pooling a sentence-transformers folder declares, rebuilt with poolkit's poolers and torch layers.

A folder's ``modules.json`` lists what runs after its Transformer: a ``Pooling`` module (``1_Pooling/config.json``:
one mode or several, concatenated in sentence-transformers' order, and ``include_prompt``), ``Dense`` layers and a
``Normalize``; ``config_sentence_transformers.json`` holds its named prompts. :func:`read_declared` reads them and
:class:`DeclaredPooling` rebuilds them, so ``TextEncoder(folder, pooler="auto")`` gives
``SentenceTransformer(folder).encode`` 's vectors without sentence-transformers installed and without running any
code from the folder (a Dense layer's activation must be a ``torch.nn`` class).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ..errors import PoolkitError

#: the pooler name that asks for a folder's declared pooling
AUTO = "auto"
#: sentence-transformers' pooling modes in its concatenation order -> poolkit's poolers.
MODES = {"cls": "cls", "max": "max", "mean": "mean", "mean_sqrt_len_tokens": "mean_sqrt_len",
         "weightedmean": "weighted_mean", "lasttoken": "last"}
#: The older config's one flag per mode (sentence-transformers < 5.2), in the same order.
LEGACY_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
TRANSFORMER, POOLING, DENSE, NORMALIZE = "Transformer", "Pooling", "Dense", "Normalize"
#: sentence-transformers' Dense activation when its config names none
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"


@dataclass(frozen=True)
class Declared:
    """What a sentence-transformers folder declares: where its encoder is, its pooling modes (and whether they
    pool a prompt's tokens), the Dense folders after them, and whether it normalises."""

    encoder: Path
    modes: tuple[str, ...]
    include_prompt: bool = True
    dense: tuple[Path, ...] = ()
    normalize: bool = False

    @property
    def pooler_spec(self) -> dict[str, Any]:
        """The poolkit pooler of the modes: one of them, or ``concat`` of several."""
        names = [MODES[mode] for mode in self.modes]
        return {"name": names[0]} if len(names) == 1 else {"name": "concat", "poolers": names}

    @property
    def label(self) -> str:
        """e.g. ``mean+normalize`` or ``cls+dense+normalize``: the modes, then the modules after them."""
        return "+".join([*(MODES[mode] for mode in self.modes), *("dense" for _ in self.dense),
                         *(["normalize"] if self.normalize else [])])

    def describe(self) -> dict[str, Any]:
        """A JSON record of what runs (for run settings and result files)."""
        return {"declared": self.label, "pooler": self.pooler_spec, "dense": len(self.dense),
                "normalize": self.normalize, "include_prompt": self.include_prompt}


def read_declared(folder: str | Path) -> Declared | None:
    """What ``folder``'s ``modules.json`` declares, or None when it has none (not a sentence-transformers folder).

    A module poolkit cannot rebuild (e.g. a CNN, LSTM, WordWeights or Router) is refused in one line, as are
    files that do not parse."""
    root = Path(folder)
    listing = root / "modules.json"
    if not listing.is_file():
        return None
    modules = _json(listing)
    if not isinstance(modules, list) or not all(isinstance(m, dict) and "type" in m for m in modules):
        raise PoolkitError(f"{listing} is not a list of modules with a type each: pass an explicit pooler")
    kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
    unknown = sorted({kind for kind in kinds if kind not in (TRANSFORMER, POOLING, DENSE, NORMALIZE)})
    if unknown:
        raise PoolkitError(f"{listing} declares {', '.join(unknown)}, which poolkit does not rebuild (it knows "
                           "Transformer, Pooling, Dense, Normalize): pass an explicit pooler")
    order = [TRANSFORMER, POOLING]
    if kinds[:2] != order or kinds.count(TRANSFORMER) != 1 or kinds.count(POOLING) != 1 or (
            NORMALIZE in kinds and kinds.index(NORMALIZE) != len(kinds) - 1):
        raise PoolkitError(f"{listing} lists {' -> '.join(kinds)}; poolkit rebuilds Transformer -> Pooling -> "
                           "Dense ... -> Normalize: pass an explicit pooler")
    paths = [root / str(m.get("path", "")) for m in modules]
    pooling = _json(paths[1] / "config.json")
    modes = _modes(pooling, paths[1] / "config.json")
    return Declared(encoder=paths[0], modes=modes, include_prompt=bool(pooling.get("include_prompt", True)),
                    dense=tuple(p for p, kind in zip(paths, kinds) if kind == DENSE),
                    normalize=NORMALIZE in kinds)


def declared_pooler_spec(folder: str | Path | None, where: str) -> tuple[dict[str, Any], Declared]:
    """The registry pooler a sentence-transformers folder's pooling is (``pooler="auto"`` in compare and train, which
    train a pooler and head of the registry: ``where`` names the command in the refusals): its modes as one pooler or
    ``concat``, and what it declares. Refused in one line when the folder declares nothing, or Dense layers after its
    pooling (neither trains them); its Normalize leaves a cosine unchanged and is not applied to a head's input."""
    declared = read_declared(folder) if folder is not None else None
    if declared is None:
        raise PoolkitError(f"{where}: `auto` is the pooling a sentence-transformers folder declares, and {folder} "
                           "declares none (no modules.json): name a pooler")
    if declared.dense:
        raise PoolkitError(f"{where}: {folder} declares {declared.label}, and {where} trains no Dense layers after "
                           f"a pooler: pass {declared.pooler_spec['name']} to compare its pooling alone, or embed / "
                           "evaluate with `auto` for the whole")
    return declared.pooler_spec, declared


def declared_token_pooler(folder: str | Path) -> str | None:
    """The one token pooler a sentence-transformers folder declares (``mean`` for all-MiniLM-L6-v2), the pooling its
    encoder was trained with; None without a declaration, with several modes, or with one poolkit cannot read."""
    try:
        declared = read_declared(folder)
    except PoolkitError:
        return None
    return MODES[declared.modes[0]] if declared is not None and len(declared.modes) == 1 else None


def with_token_pooler(spec: dict[str, Any], token_pooler: str | None) -> dict[str, Any]:
    """``spec`` with ``token_pooler`` filled in when it is a layer pooler's (one with a ``token_pooler`` option)
    and the spec does not set it: a layer pooler then pools each layer's tokens as the encoder was trained to."""
    from ..pooling import pooler_options

    if token_pooler is None or "token_pooler" in spec or "token_pooler" not in pooler_options(spec["name"]):
        return spec
    return {**spec, "token_pooler": token_pooler}


def read_prompts(folder: str | Path) -> tuple[dict[str, str], str | None]:
    """The named prompts of ``folder``'s ``config_sentence_transformers.json`` and its ``default_prompt_name``
    (none when the file is absent)."""
    where = Path(folder) / "config_sentence_transformers.json"
    config = _json(where, missing={}) if Path(folder).is_dir() else {}
    named = config.get("prompts") or {} if isinstance(config, dict) else None
    if not isinstance(named, dict) or not all(isinstance(v, str) for v in named.values()):
        raise PoolkitError(f"{where}: prompts must map names to strings")
    default = config.get("default_prompt_name") or None
    if default is not None and default not in named:
        raise PoolkitError(f"{where}: default_prompt_name {default!r} is not one of its prompts "
                           f"({', '.join(named) or 'none'})")
    return dict(named), default


class AfterPooling(nn.Module):
    """The modules a folder declares after its pooling: Dense layers (linear, then a ``torch.nn`` activation, plus
    the input when ``use_residual``), then Normalize. (B, D) -> (B, output_dim).

    Built from :meth:`get_config` 's record (a saved :class:`~poolkit.models.PooledModel` keeps it in its config and
    the weights in its state dict), or read with its weights from a folder by :meth:`from_declared`."""

    def __init__(self, dense: Sequence[dict[str, Any]], normalize: bool, width: int,
                 sources: Sequence[str] | None = None) -> None:
        """``sources``: where each Dense config comes from, named in the refusals (default: the model's config)."""
        super().__init__()
        self.dense = nn.ModuleList()
        for config, where in zip(dense, sources or ["the model's config"] * len(dense)):
            layer = _Dense.from_config(config, width, where)
            width = layer.out_features
            self.dense.append(layer)
        self.normalize = bool(normalize)
        self.output_dim = width

    @classmethod
    def from_declared(cls, declared: Declared, width: int) -> AfterPooling:
        """The Dense layers and Normalize ``declared`` lists, each Dense with the weights saved in its folder."""
        after = cls([_dense_config(folder) for folder in declared.dense], declared.normalize, width,
                    [str(folder / "config.json") for folder in declared.dense])
        for folder, layer in zip(declared.dense, after.dense):
            try:
                layer.load_state_dict(_weights(folder), strict=True)
            except RuntimeError as err:
                raise PoolkitError(f"{folder}: its weights do not fit its config.json "
                                   f"({str(err).splitlines()[0]})") from None
        return after

    def get_config(self) -> dict[str, Any]:
        """A JSON record that rebuilds these modules (without their weights): ``{"dense": [...], "normalize": ...}``."""
        return {"dense": [layer.get_config() for layer in self.dense], "normalize": self.normalize}

    def forward(self, pooled: Tensor) -> Tensor:
        for layer in self.dense:
            pooled = layer(pooled)
        return F.normalize(pooled, dim=-1) if self.normalize else pooled


class _Dense(nn.Module):
    """sentence-transformers' Dense: activation(linear(x)) (+ x, or its projection, with ``use_residual``)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, activation: str, residual: bool,
                 where: str) -> None:
        super().__init__()
        self.out_features = out_features
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = activation
        self.activation_function = _activation(activation, where)
        self.use_residual = residual
        self.residual = nn.Linear(in_features, out_features, bias=False) if residual and (
            in_features != out_features) else None

    @classmethod
    def from_config(cls, config: dict[str, Any], width: int, where: str) -> _Dense:
        """A Dense layer of a config.json's (or :meth:`get_config` 's) fields, taking ``width`` features."""
        try:
            in_features, out_features = int(config["in_features"]), int(config["out_features"])
        except (KeyError, TypeError, ValueError):
            raise PoolkitError(f"{where}: a Dense layer needs in_features and out_features") from None
        if in_features != width:
            raise PoolkitError(f"{where}: a Dense layer takes {in_features} features but the modules before it give "
                               f"{width}")
        return cls(in_features, out_features, bool(config.get("bias", True)),
                   str(config.get("activation_function", DEFAULT_ACTIVATION)), bool(config.get("use_residual", False)),
                   where)

    def get_config(self) -> dict[str, Any]:
        return {"in_features": self.linear.in_features, "out_features": self.out_features,
                "bias": self.linear.bias is not None, "activation_function": self.activation,
                "use_residual": self.use_residual}

    def forward(self, x: Tensor) -> Tensor:
        out = self.activation_function(self.linear(x))
        if self.use_residual:
            out = out + (x if self.residual is None else self.residual(x))
        return out


def _dense_config(folder: Path) -> dict[str, Any]:
    """A Dense folder's config.json, refused when it reads or writes other than the sentence embedding."""
    config = _json(folder / "config.json")
    if not isinstance(config, dict):
        raise PoolkitError(f"{folder / 'config.json'} is not a Dense layer's config (a JSON object)")
    for key in ("module_input_name", "module_output_name"):
        if config.get(key) not in (None, "sentence_embedding"):
            raise PoolkitError(f"{folder / 'config.json'}: {key} {config[key]!r} is not the sentence embedding, "
                               "which poolkit does not rebuild: pass an explicit pooler")
    return config


def _activation(path: str, where: str) -> nn.Module:
    """An instance of the ``torch.nn`` module class named by ``path`` (``torch.nn.modules.activation.Tanh``);
    any other name is refused, since it would import code poolkit does not know."""
    module_name, _, class_name = str(path).rpartition(".")
    if not (module_name == "torch.nn" or module_name.startswith("torch.nn.")):
        raise PoolkitError(f"{where}: activation_function {path!r} is not a torch.nn class; poolkit "
                           "imports no other code: pass an explicit pooler")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        raise PoolkitError(f"{where}: no activation_function {path!r} in this torch") from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise PoolkitError(f"{where}: activation_function {path!r} is not a torch.nn module class")
    return cls()


def _weights(folder: Path) -> dict[str, Tensor]:
    """A Dense folder's tensors: model.safetensors, else pytorch_model.bin read with ``weights_only`` (no pickled
    code runs)."""
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(folder / "model.safetensors"))
    if (folder / "pytorch_model.bin").is_file():
        try:
            return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - torch raises UnpicklingError, RuntimeError, ...
            raise PoolkitError(f"{folder / 'pytorch_model.bin'} holds more than tensors, and poolkit loads no "
                               f"pickled objects ({type(err).__name__}): save it as model.safetensors") from None
    raise PoolkitError(f"{folder} has no model.safetensors or pytorch_model.bin")


def _modes(config: dict[str, Any], where: Path) -> tuple[str, ...]:
    """The pooling modes of a Pooling config, new form (``pooling_mode``) or old (one flag per mode)."""
    mode = config.get("pooling_mode")
    if mode is None:
        modes = tuple(name for key, name in LEGACY_MODES.items() if config.get(key))
        return modes or ("mean",)
    modes = (mode,) if isinstance(mode, str) else tuple(mode) if isinstance(mode, list) else None
    if not modes or any(m not in MODES for m in modes):
        raise PoolkitError(f"{where}: pooling_mode {mode!r} is not one of {', '.join(MODES)}")
    return modes


def _json(path: Path, missing: Any = None) -> Any:
    """The parsed file (``missing`` when it does not exist and one is given), or a one-line error."""
    if missing is not None and not path.is_file():
        return missing
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise PoolkitError(f"cannot read {path}: {type(err).__name__}: {str(err).splitlines()[0]}") from None
