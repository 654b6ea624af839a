"""Any poolkit pooler as a sentence-transformers module, in place of ``Pooling``.

    from sentence_transformers import SentenceTransformer, models
    from poolkit.models.st_pooling import PoolkitPooling
    word = models.Transformer(path, config_kwargs={"output_hidden_states": True})  # layer poolers only
    model = SentenceTransformer(modules=[word, PoolkitPooling(word.get_embedding_dimension(), "attention")])

The module saves its config (the pooler's spec, ``pooler.get_config()``) as JSON and its weights as safetensors, and
``SentenceTransformer(saved_dir, trust_remote_code=True)`` loads it back (sentence-transformers >= 6
asks for ``trust_remote_code`` before importing a module class from outside its own package).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ..errors import PoolkitError
from ..extras import require
from ..pooling import build_pooler, pooler_options, pooler_spec
from ..pooling.masking import skip_first_tokens

require("st", "sentence_transformers.base.modules.module")  # the path sentence-transformers >= 5.4 has

from sentence_transformers.base.modules.module import Module  # noqa: E402


#: the poolers that divide by a count of the real tokens, which sentence-transformers' Pooling replaces by a
#: ``token_weights_sum`` feature when a module before it (WordWeights) gives one
COUNTED = ("mean", "mean_sqrt_len", "weighted_mean")


def _weights_sum_factor(name: str, mask: Tensor, weights_sum: Tensor) -> Tensor:
    """(B,) what turns ``name``'s pooled vector into sentence-transformers' with ``token_weights_sum``: the count it
    divided by (n real tokens; for weighted_mean the position weights' sum n(n + 1) / 2) over that sum (square
    roots of both for mean_sqrt_len)."""
    n = mask.sum(dim=1).float()
    ratio = (n * (n + 1) / 2 if name == "weighted_mean" else n) / weights_sum.float().clamp(min=1e-9)
    return ratio.sqrt() if name == "mean_sqrt_len" else ratio


#: poolkit's poolers that sentence-transformers' ``Pooling`` has, and its name for each
NATIVE = {"mean": "mean", "cls": "cls", "max": "max", "last": "lasttoken", "weighted_mean": "weightedmean",
          "mean_sqrt_len": "mean_sqrt_len_tokens"}


class PoolkitPooling(Module):
    """Pools ``token_embeddings`` (or ``all_layer_embeddings`` for layer poolers) into ``sentence_embedding``."""

    config_keys = ["embedding_dimension", "pooler", "include_prompt"]
    config_file_name = "poolkit_config.json"

    def __init__(self, embedding_dimension: int, pooler: str | dict[str, Any] = "mean",
                 num_layers: int | None = None, include_prompt: bool = True) -> None:
        """``pooler``: a name or a spec dict; ``num_layers``: the encoder's transformer layers (layer poolers);
        ``include_prompt=False``: the prompt's tokens (sentence-transformers' ``prompt_length`` feature) are kept out
        of the pool, as its own ``Pooling(include_prompt=False)`` does."""
        super().__init__()
        self.embedding_dimension = embedding_dimension
        self.include_prompt = bool(include_prompt)
        self.module = build_pooler(pooler, embedding_dimension, num_layers)

    @property
    def pooler(self) -> dict[str, Any]:
        """The pooler's spec (``get_config()``): what config_keys saves."""
        return self.module.get_config()

    @classmethod
    def for_transformer(cls, transformer, pooler: str | dict[str, Any] = "mean",
                        include_prompt: bool = True) -> Module:
        """Sized for a sentence-transformers ``Transformer`` module (num_layers filled in when needed). A pooler that
        sentence-transformers has itself (mean, cls, max, last, weighted_mean, mean_sqrt_len, with no options) comes
        back as its own ``Pooling``, so that a saved folder loads anywhere, without poolkit and without
        ``trust_remote_code`` (which sentence-transformers asks for before it imports a module class of another
        package, as it must for the other poolers)."""
        spec = pooler_spec(pooler)
        native = NATIVE.get(spec["name"])
        defaults = pooler_options(spec["name"])  # a full spec (get_config()) with every option at its default is too
        options = {k: v for k, v in spec.items() if k not in ("name", "hidden_size", "num_layers")}
        if native is not None and all(k in defaults and defaults[k] == v for k, v in options.items()):
            from sentence_transformers.sentence_transformer.modules import Pooling

            return Pooling(transformer.get_embedding_dimension(), pooling_mode=native, include_prompt=include_prompt)
        return cls(transformer.get_embedding_dimension(), pooler, transformer.auto_model.config.num_hidden_layers,
                   include_prompt=include_prompt)

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if self.module.kind == "layer":
            states = features.get("all_layer_embeddings")
            if states is None:
                raise PoolkitError(f"{self.module.name} needs all hidden states: build the Transformer module with "
                                   "config_kwargs={'output_hidden_states': True}")
        else:
            states = features["token_embeddings"]
        mask = features.get("attention_mask")
        prompt = features.get("prompt_length") if not self.include_prompt else None
        if prompt is not None and mask is not None:  # an int, or a tensor of equal lengths (training batches)
            mask = skip_first_tokens(mask, int(prompt[0] if isinstance(prompt, Tensor) else prompt))
        pooled: Tensor = self.module(states, mask)
        weights_sum = features.get("token_weights_sum")  # a WordWeights module before: its weights' sum per text
        if weights_sum is not None and self.module.name in COUNTED and mask is not None:
            pooled = pooled * _weights_sum_factor(self.module.name, mask, weights_sum).to(pooled.dtype)[:, None]
        features["sentence_embedding"] = pooled
        return features

    def get_embedding_dimension(self) -> int:
        return self.module.output_dim

    get_sentence_embedding_dimension = get_embedding_dimension

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        """The config, and the weights only for a pooler that has some (no empty model.safetensors for mean)."""
        self.save_config(output_path)
        if self.state_dict():
            self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs: Any) -> PoolkitPooling:
        hub = {"subfolder": subfolder, "token": token, "cache_folder": cache_folder, "revision": revision,
               "local_files_only": local_files_only}
        module = cls(**cls.load_config(model_name_or_path, **hub))
        if module.state_dict():
            cls.load_torch_weights(model_name_or_path, model=module, **hub)
        return module
