"""What a pooler looks at: its token weights merged back to words, its layer weights, one row per head / query.

``explain(model, texts)`` runs a ``poolkit train`` run folder (every fold model, averaged), one ``fold_K`` folder,
a :class:`~poolkit.models.PooledModel`, or an encoder with a pooler, and returns per text the prediction and the
weights the pooler returned (``return_weights=True``, the contract of :mod:`poolkit.pooling.base`). Sub-word pieces
are merged into the words the tokenizer split the text into (its ``word_ids``) by *summing* their weights, so a
word's weight is the share of the pooled vector it carries; special tokens ([CLS], [SEP], ...) stay entries of their
own, so that a CLS pooler's one-hot weight stays visible.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import PoolkitError
from ..io.runs import TRAIN_META, fold_models
from ..models.encoders import appends_eos
from ..models.heads import head_scores
from ..pooling import Pooler, build_pooler

MERGE_NOTE = ("sub-word pieces merged into words by summing their weights (the tokenizer's word_ids); special "
              "tokens kept as entries of their own")



@dataclass
class TextExplanation:
    """One text: its words (and special tokens) with weights, the prediction, optional per-head rows and layers.

    ``spans``: each word's (start, end) in ``text``, None for special tokens. ``weights`` (W,): the pooler's token
    weights summed per word. ``rows`` (R, W) with ``row_labels``: one row per head / query (multi-head and latent
    poolers). ``layer_weights`` (L,) with ``layer_labels``: layer poolers. ``scores``: class probabilities or
    regression values. ``error``: with a target, 1 - p(target class) or |value - target|.
    """

    text: str
    words: list[str]
    spans: list[tuple[int, int] | None]
    weights: np.ndarray
    prediction: str | float | None = None
    probability: float | None = None
    scores: dict[str, float] = field(default_factory=dict)
    rows: np.ndarray | None = None
    row_labels: list[str] = field(default_factory=list)
    layer_weights: np.ndarray | None = None
    layer_labels: list[str] = field(default_factory=list)
    truncated: bool = False
    target: str | float | None = None
    error: float | None = None

    def content_words(self) -> list[int]:
        """Indices of the real words (special tokens left out)."""
        return [i for i, span in enumerate(self.spans) if span is not None]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("weights", "rows", "layer_weights"):
            if out[key] is not None:
                out[key] = np.asarray(out[key]).round(6).tolist()
        out["spans"] = [list(s) if s is not None else None for s in self.spans]
        return out


@dataclass
class Explanation:
    """Every text's :class:`TextExplanation`, with what the weights mean and where the model came from."""

    items: list[TextExplanation]
    pooler: dict[str, Any]
    meaning: str
    source: str
    n_models: int
    task: str | None
    label_names: list[str] | None
    merge: str = MERGE_NOTE

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> TextExplanation:
        return self.items[index]

    def top_words(self, k: int = 8, min_count: int = 3) -> dict[str, list[tuple[str, float, int]]]:
        """Per predicted class: the ``k`` words (lower-cased) with the highest mean *lift* -- a word's weight times
        the text's number of words, so 1 is a uniform share whatever the text's length -- over the texts where
        they occur at least ``min_count`` times; [(word, mean lift, count)]."""
        lifts: dict[str, dict[str, list[float]]] = {}
        for item in self.items:
            words = item.content_words()
            if item.prediction is None or not words:
                continue
            total = sum(item.weights[i] for i in words)
            per_class = lifts.setdefault(str(item.prediction), {})
            for i in words:
                if item.words[i].isalpha() and total > 0:
                    per_class.setdefault(item.words[i].lower(), []).append(item.weights[i] / total * len(words))
        return {label: sorted(((w, float(np.mean(v)), len(v)) for w, v in found.items() if len(v) >= min_count),
                              key=lambda t: -t[1])[:k]
                for label, found in sorted(lifts.items())}

    def to_dict(self) -> dict[str, Any]:
        return {"pooler": self.pooler, "meaning": self.meaning, "source": self.source, "n_models": self.n_models,
                "task": self.task, "label_names": self.label_names, "merge": self.merge,
                "items": [item.to_dict() for item in self.items]}


@dataclass
class _Member:
    """One model to run: a PooledModel (with its head) or an encoder + pooler (no head, no prediction)."""

    tokenizer: Any
    pooler: Pooler
    max_length: int
    model: Any = None
    encoder: Any = None
    task: str | None = None
    label_names: list[str] | None = None
    target_cols: list[str] | None = None

    @property
    def append_eos(self) -> bool:
        """Whether each text ends with the tokenizer's EOS, as TextEncoder, train and predict run this pooler
        (:func:`poolkit.models.encoders.appends_eos`)."""
        return appends_eos(self.pooler, self.tokenizer)

    @property
    def weights_asked(self) -> bool | str:
        """What the pooler is asked for: its per-head / per-query rows when it has them (asked per call, so
        concurrent explanations share nothing), else its weights."""
        return "heads" if self.pooler.headed else True

    def forward(self, batch: dict[str, torch.Tensor], start: int) -> tuple[np.ndarray | None, Any]:
        """The texts ``start``, ... tokenized as ``batch`` -> head outputs as probabilities / values (B, C) or None,
        and the pooler's weights."""
        if self.model is not None:
            device = next(self.model.parameters()).device
            output = self.model(**{k: v.to(device) for k, v in batch.items()}, return_weights=self.weights_asked)
            return head_scores(self.task, output.logits.float().cpu().numpy()), output.weights
        batch = {k: v.to(next(self.encoder.parameters()).device) for k, v in batch.items()}
        layered = self.pooler.kind == "layer"
        output = self.encoder(**batch, output_hidden_states=layered, return_dict=True)
        states = output.hidden_states if layered else output.last_hidden_state
        return None, self.pooler(states, batch["attention_mask"], return_weights=self.weights_asked)[1]


@dataclass
class _CachedMember(_Member):
    """A pooler + head trained on cached hidden states (``poolkit compare``'s probes): ``states(positions)`` gives
    the states and mask of the texts at those positions (no encoder pass); ``outputs`` maps the head's raw outputs
    to the task's values (regression targets were standardised for training)."""

    head: Any = None
    states: Callable[[np.ndarray], tuple[Any, torch.Tensor]] | None = None
    outputs: Callable[[np.ndarray], np.ndarray] | None = None

    @property
    def append_eos(self) -> bool:
        return False  # the cache's token states are each text's own tokens (an appended EOS is left out of them)

    def forward(self, batch: dict[str, torch.Tensor], start: int) -> tuple[np.ndarray | None, Any]:
        states, mask = self.states(np.arange(start, start + len(batch["attention_mask"])))
        if mask.shape != batch["attention_mask"].shape or not torch.equal(mask, batch["attention_mask"].bool()):
            raise PoolkitError("the cached hidden states hold other tokens than the tokenizer gives these texts: "
                               "explain with the tokenizer and max_length the cache was built with")
        pooled, weights = self.pooler(states, mask, return_weights=self.weights_asked)
        raw = self.head(pooled.to(self.head.weight.dtype)).float().cpu().numpy()
        return head_scores(self.task, self.outputs(raw)), weights


class Explainer:
    """Loads ``model`` once; :meth:`explain` gives weights and predictions, :meth:`scores` predictions only.

    ``model``: a ``poolkit train`` run folder (its fold models averaged), a ``fold_K`` folder, a
    :class:`~poolkit.models.PooledModel` (``tokenizer`` needed unless its ``name_or_path`` holds one), or an encoder
    (folder / hub name or a loaded ``PreTrainedModel``) together with ``pooler`` (a name, spec or built pooler;
    without a head there is no prediction).
    """

    def __init__(self, model: Any, pooler: str | dict[str, Any] | Pooler | None = None, *, tokenizer: Any = None,
                 max_length: int | None = None, batch_size: int = 32, allow_incomplete: bool = False,
                 trust_remote_code: bool = False) -> None:
        self.batch_size = batch_size
        self._setup(*_load(model, pooler, tokenizer, max_length, allow_incomplete, trust_remote_code))

    @classmethod
    def on_cached_states(cls, probe: Any, states: Callable[[np.ndarray], tuple[Any, torch.Tensor]], tokenizer: Any,
                         max_length: int, label_names: list[str] | None, source: str,
                         target_cols: list[str] | None = None, batch_size: int = 32) -> Explainer:
        """An explainer of a pooler + head trained on cached hidden states (``probe``: a
        :class:`~poolkit.training.probing.FoldModel`) that reads the states of the texts it explains instead of
        running the encoder: ``states(positions)`` -> (states, mask) of ``texts[positions]`` (e.g. a
        :class:`~poolkit.training.features.FeatureCache`'s ``batch`` of their rows). ``source``: which model this
        is and which rows it was trained without."""
        tokenizer.padding_side = "right"  # as the cache was built: each row's tokens first
        member = _CachedMember(tokenizer, probe.model.pooler.eval(), max_length, task=probe.task,
                               label_names=label_names, target_cols=target_cols, head=probe.model.head.eval(),
                               states=states, outputs=probe.outputs)
        explainer = cls.__new__(cls)
        explainer.batch_size = batch_size
        explainer._setup([member], source)
        return explainer

    def _setup(self, members: list[_Member], source: str) -> None:
        self.members, self.source = members, source
        first = self.members[0]
        self.task, self.label_names = first.task, first.label_names
        self.pooler_spec = first.pooler.get_config()
        self.meaning = first.pooler.weight_meaning
        if first.pooler.kind == "layer":
            token = first.pooler.token
            self.meaning = (f"token weights of the layer pooler's token pooler ({token.name}: {token.weight_meaning}), "
                            "combined over the layers it mixes")

    def explain(self, texts: Sequence[str], targets: Sequence[Any] | None = None) -> Explanation:
        texts = _checked_texts(texts)
        if targets is not None and len(targets) != len(texts):
            raise PoolkitError(f"{len(targets)} targets for {len(texts)} texts: give one target per text")
        if targets is not None:
            _check_targets(targets, self.task, self.label_names)
        parts = [self._run(member, texts, with_weights=True) for member in self.members]
        items = _average(parts, texts)
        pooler = self.members[0].pooler
        for k, item in enumerate(items):
            if parts[0][k]["scores"] is not None:
                self._predict_into(item, np.mean([part[k]["scores"] for part in parts], axis=0))
            if item.rows is not None:
                item.row_labels = _row_labels(pooler)
            if item.layer_weights is not None:  # the layers mixed are the last L hidden states (0 = embeddings)
                states = pooler.num_layers + 1
                item.layer_labels = [f"layer {states - len(item.layer_weights) + i}"
                                     for i in range(len(item.layer_weights))]
            if targets is not None:
                _score_error(item, targets[k], self.task, self.label_names)
        return Explanation(items, self.pooler_spec, self.meaning, self.source, len(self.members), self.task,
                           self.label_names)

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """Class probabilities / values (N, C), averaged over the fold models; raises without a head."""
        if self.task is None:
            raise PoolkitError("an encoder + pooler has no head, so no prediction: explain a trained model "
                               "(a poolkit train folder) to get predictions")
        texts = _checked_texts(texts)
        parts = [self._run(member, texts, with_weights=False) for member in self.members]
        return np.mean([[row["scores"] for row in part] for part in parts], axis=0)

    def predicted_score(self, scores: np.ndarray) -> int:
        """Which output column the prediction reads: the most probable class, or the first target."""
        return int(np.argmax(scores)) if self.task == "classification" else 0

    def _predict_into(self, item: TextExplanation, scores: np.ndarray | None) -> None:
        if scores is None:
            return
        if self.task == "regression":
            cols = self.members[0].target_cols or [f"target_{j}" for j in range(len(scores))]
            item.scores = {c: float(v) for c, v in zip(cols, scores)}
            item.prediction = float(scores[0])
            return
        item.scores = {name: float(p) for name, p in zip(self.label_names, scores)}
        if self.task == "multilabel":
            chosen = [n for n, p in item.scores.items() if p > 0.5]
            item.prediction, item.probability = "|".join(chosen), float(max(scores))
        else:
            best = int(np.argmax(scores))
            item.prediction, item.probability = self.label_names[best], float(scores[best])

    @torch.inference_mode()
    def _run(self, member: _Member, texts: list[str], with_weights: bool) -> list[dict[str, Any]]:
        results = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start:start + self.batch_size]
            eos = member.append_eos
            encoded = member.tokenizer(chunk, padding=True, truncation=True, max_length=member.max_length - eos,
                                       return_offsets_mapping=with_weights, return_tensors="pt",
                                       **({"padding_side": "right"} if eos else {}))
            if not getattr(encoded, "is_fast", True) or not hasattr(encoded, "word_ids"):
                raise PoolkitError("explaining words needs a fast tokenizer (word_ids, offsets): load it with "
                                   "use_fast=True")
            word_ids = [encoded.word_ids(i) for i in range(len(chunk))]
            offsets = encoded.pop("offset_mapping", None)
            batch = {k: v for k, v in encoded.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
            if eos:
                batch, offsets, word_ids = _ended_by_eos(batch, offsets, word_ids, member.tokenizer.eos_token_id)
            scores, weights = member.forward(batch, start)
            if not with_weights:
                results.extend({"scores": s} for s in scores)
                continue
            layered = isinstance(weights, dict)
            token, layer = (weights.get("token"), weights.get("layer")) if layered else (weights, None)
            heads = None
            if member.pooler.headed:  # (B, R, T): one row per head / query; the pooler's weights are their mean
                heads, token = token.float(), token.float().mean(dim=1)
                heads = heads if heads.shape[1] > 1 else None
            token, layer, heads = (None if t is None else t.float().cpu().numpy() for t in (token, layer, heads))
            for i, text in enumerate(chunk):
                results.append({"scores": None if scores is None else scores[i], "token": token[i],
                                "words": _words(text, batch, i, offsets[i], word_ids[i], member.tokenizer),
                                "layer": None if layer is None else layer[i],
                                "heads": None if heads is None else heads[i]})
        return results


def explain(model: Any, texts: Sequence[str], *, pooler: str | dict[str, Any] | Pooler | None = None,
            targets: Sequence[Any] | None = None, tokenizer: Any = None, max_length: int | None = None,
            batch_size: int = 32, allow_incomplete: bool = False, trust_remote_code: bool = False) -> Explanation:
    """Per text: the prediction and the pooler's weights over its words (see :class:`Explainer` for ``model``).
    ``targets`` (optional, one per text) add each text's error."""
    return Explainer(model, pooler, tokenizer=tokenizer, max_length=max_length, batch_size=batch_size,
                     allow_incomplete=allow_incomplete, trust_remote_code=trust_remote_code).explain(texts, targets)


# -- loading -----------------------------------------------------------------------------------------
def _load(model, pooler, tokenizer, max_length, allow_incomplete, trust_remote_code) -> tuple[list[_Member], str]:
    from ..models import PooledModel
    from ..models.encoders import check_max_length, hf_bars_off, load_encoder, load_tokenizer, model_label

    if isinstance(model, PooledModel):
        if pooler is not None:
            raise PoolkitError("a PooledModel brings its own pooler: leave pooler out")
        if tokenizer is None and not model.name_or_path:
            raise PoolkitError("this PooledModel has no folder to read its tokenizer from: pass tokenizer=")
        names = [model.config.id2label[i] for i in range(model.config.num_labels)]
        member = _Member(tokenizer or load_tokenizer(model.name_or_path), model.pooler,
                         check_max_length(max_length, model.config.encoder) or 256, model=model.eval(),
                         task=model.config.task, label_names=None if model.config.task == "regression" else names)
        return [member], "a PooledModel"
    if pooler is not None:  # a bare encoder and a pooler
        if isinstance(model, (str, Path)) or model is None:
            with hf_bars_off():
                encoder = load_encoder(str(model) if model is not None else None,
                                       trust_remote_code=trust_remote_code).to(_device())
            tokenizer = tokenizer or load_tokenizer(str(model) if model is not None else None, trust_remote_code)
            label = model_label(str(model) if model is not None else None)
        else:
            encoder, label = model, type(model).__name__
        if tokenizer is None:
            raise PoolkitError("explaining a loaded encoder needs its tokenizer: pass tokenizer=")
        config = encoder.config
        built = build_pooler(pooler, config.hidden_size, getattr(config, "num_hidden_layers", None))
        built = built.to(next(encoder.parameters()).device).eval()
        member = _Member(tokenizer, built, check_max_length(max_length, config) or 256, encoder=encoder.eval())
        return [member], f"encoder {label} + pooler (no head: no prediction)"
    if not isinstance(model, (str, Path)):
        raise PoolkitError(f"cannot explain a {type(model).__name__}: pass a poolkit train folder, a fold_K folder, "
                           "a PooledModel, or an encoder together with pooler=")
    folds = fold_models(model, allow_incomplete)
    members = []
    for fold in folds:
        with hf_bars_off():
            loaded = PooledModel.from_pretrained(fold, trust_remote_code=trust_remote_code).to(_device()).eval()
        meta = json.loads((fold / TRAIN_META).read_text())
        members.append(_Member(load_tokenizer(str(fold), trust_remote_code), loaded.pooler,
                               check_max_length(max_length, loaded.config.encoder) or meta["config"]["max_length"],
                               model=loaded, task=meta["task"], label_names=meta["label_names"],
                               target_cols=meta["target_cols"]))
    source = (f"{len(folds)} fold models of {model} averaged (predictions and weights)" if len(folds) > 1
              else f"the model in {folds[0]}")
    return members, source


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _checked_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        texts = [texts]
    texts = [str(t) for t in texts]
    if not texts:
        raise PoolkitError("nothing to explain: no texts given")
    return texts


# -- weights -----------------------------------------------------------------------------------------
def _row_labels(pooler: Pooler) -> list[str]:
    heads, queries = getattr(pooler, "num_heads", 1), getattr(pooler, "num_queries", 1)
    if queries > 1:
        return [f"head {h + 1} query {q + 1}" for h in range(heads) for q in range(queries)]
    return [f"head {h + 1}" for h in range(heads)]


def _ended_by_eos(batch: dict[str, torch.Tensor], offsets: torch.Tensor | None, word_ids: list[list[int | None]],
                  eos: int) -> tuple[dict[str, torch.Tensor], torch.Tensor | None, list[list[int | None]]]:
    """A right-padded batch with the EOS put after each row's real tokens (one more column; its offsets (0, 0), no
    word), as :func:`poolkit.data.batching.tokenized` ends the texts for TextEncoder."""
    lengths = batch["attention_mask"].sum(dim=1)
    rows = torch.arange(len(lengths))
    grown = {k: torch.nn.functional.pad(v, (0, 1)) for k, v in batch.items()}
    grown["input_ids"][rows, lengths] = eos
    grown["attention_mask"][rows, lengths] = 1
    if "token_type_ids" in grown:
        grown["token_type_ids"][rows, lengths] = grown["token_type_ids"][rows, (lengths - 1).clamp(min=0)]
    offsets = None if offsets is None else torch.nn.functional.pad(offsets, (0, 0, 0, 1))
    word_ids = [ids[:n] + [None] + ids[n:] for ids, n in zip(word_ids, lengths.tolist())]
    return grown, offsets, word_ids


def _words(text: str, batch: dict[str, torch.Tensor], row: int, offsets: torch.Tensor, word_ids: list[int | None],
           tokenizer) -> list[tuple[str, tuple[int, int] | None, list[int]]]:
    """[(word, span or None, token positions)]: the text's words in order (pieces with one word_id merged),
    special tokens as their own entries."""
    mask = batch["attention_mask"][row].tolist()
    ids = batch["input_ids"][row].tolist()
    words: list[tuple[str, tuple[int, int] | None, list[int]]] = []
    seen: dict[int, int] = {}
    for t, (wid, real) in enumerate(zip(word_ids, mask)):
        if not real:
            continue
        if wid is None:
            words.append((tokenizer.convert_ids_to_tokens(ids[t]), None, [t]))
        elif wid in seen:
            word, (start, _), positions = words[seen[wid]]
            end = int(offsets[t][1])
            words[seen[wid]] = (text[start:end], (start, end), positions + [t])
        else:
            start, end = (int(v) for v in offsets[t])
            seen[wid] = len(words)
            words.append((text[start:end], (start, end), [t]))
    return words


def _merge(values: np.ndarray, words) -> np.ndarray:
    """Token values (..., T) -> word values (..., W): the sum over each word's pieces."""
    return np.stack([values[..., positions].sum(axis=-1) for _, _, positions in words], axis=-1)


def _average(parts: list[list[dict[str, Any]]], texts: list[str]) -> list[TextExplanation]:
    """Each text's words and weights, averaged over the fold models (which share the tokenizer)."""
    items = []
    for k, text in enumerate(texts):
        runs = [part[k] for part in parts]
        words = runs[0]["words"]
        if any([w[:2] for w in run["words"]] != [w[:2] for w in words] for run in runs):
            raise PoolkitError("the fold models split the text into different words: explain one fold_K folder")
        spans = [span for _, span, _ in words]
        ends = [span[1] for span in spans if span is not None]
        item = TextExplanation(text, [w for w, _, _ in words], spans,
                               np.mean([_merge(run["token"], words) for run in runs], axis=0),
                               truncated=bool(text[max(ends, default=0):].strip()))
        if runs[0]["heads"] is not None:
            item.rows = np.mean([_merge(run["heads"], words) for run in runs], axis=0)
        if runs[0]["layer"] is not None:
            item.layer_weights = np.mean([run["layer"] for run in runs], axis=0)
        items.append(item)
    return items


def _check_targets(targets: Sequence[Any], task: str | None, label_names: list[str] | None) -> None:
    """Refuse, before any text is encoded, targets the model's task cannot score: a regression model's target that
    is not a number, a classifier's that is not one of its labels."""
    if task == "regression":
        for target in targets:
            try:
                float(target)
            except (TypeError, ValueError):
                raise PoolkitError(f"the model predicts regression values, and the target {target!r} is not a number: "
                                   "check `target_col` (it must hold the values the model was trained on)") from None
    elif task == "classification":
        names = label_names or []
        unknown = next((target for target in targets if str(target) not in names), None)
        if unknown is not None:
            raise PoolkitError(f"target {unknown!r} is not one of the model's labels "
                               f"({', '.join(names[:8])}{', ...' if len(names) > 8 else ''}): check `target_col`")


def _score_error(item: TextExplanation, target: Any, task: str | None, label_names: list[str] | None) -> None:
    """The target and the error: 1 - p(target class) (classification), |prediction - target| (regression)."""
    if task == "classification":
        item.target = str(target)
        item.error = 1.0 - item.scores[item.target]
    elif task == "regression":
        item.target = float(target)
        item.error = abs(float(item.prediction) - item.target)
    else:
        item.target = None if task is None else str(target)
