"""``compare``: which pooling for this data and this encoder, as a pipeline of named steps over one
:class:`CompareConfig`: load (the table, the folds), encode (once, into the feature cache), probe (every pooler +
head on the cache, the same K folds), baseline (the tuned linear row), explain (the best learned pooler's weights on
held-out texts), publish (the leaderboard, on disk before any fine-tuning) and fine-tune (the encoder with the K
best poolers). For the embedding tasks (retrieval, similarity) the table is one of pairs, probe scores the poolers'
embeddings (:mod:`poolkit.training.contrastive`: zero-shot rows, contrastively trained rows), fine-tune trains
encoder + pooler contrastively (:mod:`poolkit.training.finetune_pairs`), and there is no baseline or explain step.
Each step reports through ``report``, a callable taking one line (the CLI passes ``print``); the library prints
nothing.

Under ``torchrun`` / ``accelerate launch -m poolkit.cli compare ...`` every process encodes its share of the texts
into the feature cache (:mod:`poolkit.training.features`); rank 0 joins them, trains the heads alone and returns the
leaderboard; the others return None once their share is written. Fine-tuning and ``cache=False`` are refused there.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..data import TableData, repeated_folds
from ..data.pairs import PAIR_TASKS, check_retrieval_columns, load_pairs, pair_folds, score_column
from ..errors import PoolkitError
from ..io import RunFolder
from ..settings import check_counts, config_from
from ..wording import counted
from .config import MAX_LENGTH, CompareConfig, ProbeConfig
from .export import check_export, check_export_pooler
from .inputs import check_rates, declared_poolers, fit_to_encoder, load, resolve_poolers
from .leaderboard import OUTPUTS, Leaderboard, leaderboard_row, mean_std
from .processes import process_rank

DEFAULT_DATA = "builtin:embedded"
#: ``compare``'s report explains this many of fold 0's held-out texts per class (other tasks: EXPLAINED_TEXTS).
EXPLAINED_PER_CLASS = 3
EXPLAINED_TEXTS = 30


def compare_config(**settings: Any) -> CompareConfig:
    """A CompareConfig from keyword settings; unknown names raise naming the known ones, bad rates fail."""
    config = config_from(CompareConfig, "compare", settings)
    check_rates(pooler_lr=config.pooler_lr, encoder_lr=config.encoder_lr)
    check_counts(config, ("finetune_top", "seed"), least=0)  # 0: no fine-tuning; seeds are numpy's (>= 0)
    check_counts(config, ("repeats",))
    return replace(config, sizes=learning_sizes(config.sizes))


def learning_sizes(sizes: Any) -> tuple[int, ...]:
    """``sizes`` as distinct training sizes, smallest first: ints, or one text of them ("250,500 1000")."""
    if isinstance(sizes, str):
        try:
            sizes = [int(piece) for piece in sizes.replace(",", " ").split()]
        except ValueError:
            raise PoolkitError(f"`sizes` must be whole numbers of training rows, got {sizes!r}") from None
    sizes = [sizes] if isinstance(sizes, int) else list(sizes)
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in sizes):
        raise PoolkitError(f"`sizes` must be positive whole numbers of training rows per fold, got {sizes!r}")
    return tuple(sorted(set(sizes)))


def compare_folder(out: str | Path) -> RunFolder:
    """compare's output folder: the leaderboard files and report.html (each fine-tuned run under finetuned/ is a
    train folder of its own)."""
    return RunFolder(Path(out), OUTPUTS)


@dataclass
class Comparison:
    """What the steps of one compare hand on: the settings, the table and its folds, then each step's result."""

    config: CompareConfig
    specs: list[dict[str, Any]]
    #: the table, or for the embedding tasks its pairs over their distinct texts (a contrastive.PairLayout)
    table: Any
    probe: Any  # ProbeConfig
    report: Callable[[str], None]
    progress: bool
    metric: Any = None
    #: the (train, test) rows (pair tasks: units) of every fold, repeat by repeat: the same for every row
    splits: list[Any] = field(default_factory=list)
    features: Any = None
    settings: dict[str, Any] = field(default_factory=dict)
    results: list[Any] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    curve: Any = None  # a curves.LearningCurve
    explained: Any = None
    started: float = field(default_factory=time.perf_counter)

    @property
    def pairs(self) -> bool:
        """Whether this is an embedding task (retrieval, similarity): a table of pairs, no head."""
        return self.table.task in PAIR_TASKS


def compare(data: str | Path | TableData | None = None, *, poolers: str | Sequence[str | dict[str, Any]] = "default",
            text_col: str = "text", target_col: str | Sequence[str] | None = None, task: str | None = None,
            pair_col: str = "pair", negative_col: str | None = None, corpus: str | Path | Sequence[str] | None = None,
            limit: int | None = None, out: str | Path | None = None, force: bool = False, progress: bool = True,
            report: Callable[[str], None] | None = None, export: str | Path | None = None,
            export_pooler: str | None = None, export_format: str = "poolkit", export_mode: str | None = None,
            **settings: Any) -> Leaderboard | None:
    """Encode ``data`` once with the frozen encoder, train every pooler + head on the cached layers with the same
    K folds, then (``finetune_top`` K > 0) fine-tune the encoder with the K best poolers; the steps are those of the
    module doc. ``settings``: the fields of :class:`CompareConfig` (model, folds, epochs, pooler_lr, ...).

    ``task`` retrieval or similarity: ``data`` is a table of pairs read as :func:`poolkit.data.pairs.load_pairs` reads
    it (``text_col``, ``pair_col``, ``target_col`` (default: score), ``negative_col``, ``corpus``); each row of the
    leaderboard carries every metric's fold mean under the metric's name (``ndcg@10``, ..., ``spearman``).
    ``target_col`` of the other tasks: default label.

    Without ``data``: the embedded WordNet subset, 3 folds and 8 epochs unless given (else 5 folds, 20 epochs).
    With ``out`` (locked for the run), leaderboard.csv / .json / .png and report.html are written there (the frozen
    board before fine-tuning starts) and the fine-tuned models under ``out/finetuned/``; without, fine-tuned models
    are discarded. ``report``: told each step's line (None: nothing is said); ``progress``: progress bars.
    ``export``: a folder for the winner refit on every row (:mod:`poolkit.training.export`; ``export_pooler``: the
    row label to export instead of the best; ``export_mode``: frozen or finetuned rows only, else either, by the
    metric; ``export_format``: poolkit or sentence-transformers), written last; an existing one is replaced only
    with ``force``.
    """
    config = compare_config(**settings)
    poolers, declared = declared_poolers(poolers, config.model)
    specs = resolve_poolers(poolers)  # bad names fail before the data is read
    rank, world = process_rank()
    check_retrieval_columns(task, negative_col, corpus)
    if world > 1 and config.finetune_top > 0:
        raise PoolkitError("`finetune_top` cannot be used under torchrun / accelerate launch (the processes share "
                           "only the encoding): compare with several processes, then fine-tune with `poolkit train`")
    out = out if rank == 0 else None  # the other processes only encode their share
    if out is not None:
        compare_folder(out).check(force=force)
    if rank == 0:
        check_export(export, force, export_pooler, specs, export_format, config.projection and task in PAIR_TASKS,
                     export_mode, config.finetune_top)
    say = report if report is not None and rank == 0 else _quiet
    if declared is not None:
        say(f"auto: {declared.pooler_spec['name']}, the pooling the model folder declares "
            f"({declared.label}" + ("; a Normalize leaves the cosine unchanged and is not applied before a head"
                                     if declared.normalize else "") + ")")
    columns = {"text_col": text_col, "target_col": target_col, "pair_col": pair_col, "negative_col": negative_col,
               "corpus": corpus}
    run = load_step(data, specs, config, columns, task, limit, say, progress and rank == 0)
    if export is not None and export_pooler is not None:  # the labels are settled now, before any encoding
        check_export_pooler(export_pooler, run.specs, config.projection and run.pairs)
    with ExitStack() as held:
        if out is not None:  # one run per folder: locked for the whole run
            out = held.enter_context(compare_folder(out).claim(force=force))
        if not encode_step(run):
            return None  # not rank 0: its share of the encoding is written
        probe_step(run)
        baseline_step(run)
        if config.sizes:  # the board is on disk before the (long) learning curve
            publish_step(run, out)
        curve_step(run)
        explain_step(run)
        board = publish_step(run, out)  # on disk before any (long) fine-tuning starts
        if config.finetune_top > 0:
            finetune_step(run, out, force)
            board = publish_step(run, out)
        if export is not None:
            export_step(run, export, export_pooler, export_format, export_mode)
            board = publish_step(run, out)
        return board


def _quiet(line: str) -> None:
    pass


def load_step(data, specs: list[dict[str, Any]], config: CompareConfig, columns: dict[str, Any], task: str | None,
              limit: int | None, report: Callable[[str], None], progress: bool) -> Comparison:
    """load: the encoder's fit for every pooler and the token limit, the table (``columns``: compare's column
    arguments), and its folds checked (too few rows per class, or queries, fails here, before encoding)."""
    from ..models.declared import declared_token_pooler, with_token_pooler
    from ..models.encoders import resolve_model
    from .contrastive import PairLayout
    from .metrics import primary_metric

    token = declared_token_pooler(resolve_model(config.model))
    if any(with_token_pooler(spec, token) != spec for spec in specs):
        specs = [with_token_pooler(spec, token) for spec in specs]
        report(f"layer poolers pool each layer's tokens with {token}, the pooling the model declares (give a layer "
               "pooler its token_pooler to choose another)")
    max_length = fit_to_encoder(config.model, config.max_length, MAX_LENGTH, config.trust_remote_code, specs)
    config = replace(config.for_data(quick=data is None), max_length=max_length)
    probe = ProbeConfig(folds=config.folds, repeats=config.repeats, epochs=config.epochs, batch_size=config.batch_size,
                        pooler_lr=config.pooler_lr, patience=config.patience, seed=config.seed,
                        projection=config.projection)
    if task in PAIR_TASKS:
        if data is None:
            raise PoolkitError(f"`task` {task} needs `data`: a table of pairs, or builtin:wordnet-examples / "
                               "builtin:wordnet-similarity")
        pairs = load_pairs(data, task, text_col=columns["text_col"], pair_col=columns["pair_col"],
                           target_col=score_column(columns["target_col"], task), negative_col=columns["negative_col"],
                           corpus=columns["corpus"], limit=limit, seed=config.seed)
        splits = repeated_folds(pairs, probe.folds, probe.repeats, probe.val_fraction, probe.seed, pair_folds)
        check_sizes(pairs, splits, config.sizes, probe)
        return Comparison(config, specs, PairLayout.of(pairs), probe, report, progress, primary_metric(task), splits)
    table = load(DEFAULT_DATA if data is None else data, columns["text_col"], columns["target_col"] or "label", task,
                 limit, config.seed, report)
    splits = repeated_folds(table, probe.folds, probe.repeats, probe.val_fraction, probe.seed)
    check_sizes(table, splits, config.sizes, probe)
    return Comparison(config, specs, table, probe, report, progress, primary_metric(table.task, table.n_outputs),
                      splits)


def check_sizes(data: Any, splits: list[Any], sizes: Sequence[int], probe: ProbeConfig) -> None:
    """Refuse, before any encoding, learning-curve sizes that are not below every fold's training rows or too few
    to hold out the inner split that chooses the epoch."""
    from ..data.pairs import pair_split
    from ..data.tables import split_rows
    from .curves import subsampled_splits

    if sizes:
        subsampled_splits(data, splits, max(sizes), probe.seed)  # below every fold's training rows
        for k, (train, _) in enumerate(subsampled_splits(data, splits, min(sizes), probe.seed)):
            try:  # each fold's inner split, with the seed its training uses
                pair_split(data, train, probe.val_fraction, probe.seed + k) if not hasattr(data, "subset") else \
                    split_rows(data.subset(train), probe.val_fraction, probe.seed + k)
            except PoolkitError as err:
                raise PoolkitError(f"`sizes` {min(sizes)}: {err}") from None


def fold_size_ratio(splits: list[Any]) -> float:
    """n_test / n_train of the corrected resampled t-test (:mod:`poolkit.training.significance`): the rows inside
    / outside a test fold (for the pair tasks the units the folds split: queries, or similarity pairs), averaged
    over the folds."""
    return float(np.mean([len(test) / len(train) for train, test in splits]))


def encode_step(run: Comparison) -> bool:
    """encode: the table's texts through the frozen encoder once, into the feature cache (what the poolers read);
    False on a process that only encodes its share."""
    from ..models.encoders import model_label, resolve_model
    from ..provenance import run_provenance
    from .features import encode_features

    config, table, pairs = run.config, run.table, run.pairs
    rows = _rows(table)
    repeats = f" x {config.repeats} repeats" if config.repeats > 1 else ""
    run.report(f"poolkit compare: {counted(len(run.specs), 'pooler')} on {table.source} ({rows}, {table.task}, "
               f"{counted(config.folds, 'fold')}{repeats}, up to {counted(config.epochs, 'epoch')}), ranked by "
               f"{run.metric.name}")
    run.started = time.perf_counter()
    run.features = encode_features(table.texts, config.model, max_length=config.max_length, cache_dir=config.cache_dir,
                                   progress=run.progress, cache=config.cache,
                                   trust_remote_code=config.trust_remote_code,
                                   poolers=run.specs, summaries=["mean"] if config.baseline and not pairs else [],
                                   token_dtype=config.cache_dtype, token_cap=config.cache_max_tokens)
    if run.features is None:
        return False
    # the model asked for now (a reused feature cache records the path of whichever install first wrote it)
    sizes = ({"rows": table.data.pairs if table.task == "retrieval" else len(table.data), "texts": len(table.texts)}
             if pairs else {"rows": len(table)})
    if table.task == "retrieval":
        sizes.update(queries=len(table.data.queries), corpus=len(table.data.corpus))
    run.settings = {"data": table.source, **sizes, "task": table.task, "model": resolve_model(config.model),
                    "model_label": model_label(config.model), "metric": run.metric.name,
                    "higher_is_better": run.metric.higher_is_better, "folds": config.folds,
                    "repeats": config.repeats, "test_over_train": round(fold_size_ratio(run.splits), 6),
                    "probe": asdict(run.probe), "encode_seconds": round(time.perf_counter() - run.started, 2),
                    "encode_ms_per_1k": run.features.meta.get("encode_ms_per_1k"),
                    "encode_device": run.features.meta.get("encode_device"),
                    "cache_bytes_per_text": round(run.features.bytes_per_text()), "cache_dtype": config.cache_dtype,
                    "cache_max_tokens": config.cache_max_tokens, "poolers": run.specs,
                    "finetune_top": config.finetune_top, **({"projection": config.projection} if pairs else {}),
                    **({"finetune_epochs": config.finetune_epochs, "encoder_lr": config.encoder_lr}
                       if config.finetune_top > 0 else {}),
                    "provenance": run_provenance()}
    return True


def _rows(table: Any) -> str:
    """What the table holds, for compare's first line: "300 rows", "120 queries, 300 documents", "200 pairs"."""
    if table.task == "retrieval":
        return f"{len(table.data.queries)} queries, {len(table.data.corpus)} documents"
    return f"{len(table.data)} pairs" if table.task == "similarity" else f"{len(table)} rows"


def _said(run: Comparison, result, label: str | None = None) -> None:
    summary = result.summary()
    run.report(f"  {label or result.label:<22} {run.metric.name} {mean_std(summary['mean'], summary['std'])}  "
               f"({result.seconds:.1f}s)")


def _probed(run: Comparison, splits: list[Any], on_result: Callable[[Any], None] | None = None,
            timed: bool = True) -> list[Any]:
    """Every pooler + head trained on the cache on ``splits``, ranked best first (``timed``: and its cost)."""
    from .contrastive import compare_pair_poolers
    from .probing import compare_poolers

    probe = compare_pair_poolers if run.pairs else compare_poolers
    return probe(run.specs, run.features, run.table, run.probe, on_result=on_result, splits=splits, timed=timed)


def probe_step(run: Comparison) -> None:
    """probe: every pooler + head trained on the cache with the same folds, ranked best first."""
    run.results = _probed(run, run.splits, on_result=lambda result: _said(run, result))
    run.rows = [leaderboard_row(r.label, r.spec, "frozen", r.metric, r.fold_metrics, r.params, r.seconds,
                                r.fold_detail, flat=run.pairs, infer_ms_per_1k=r.infer_ms_per_1k, dim=r.dim)
                for r in run.results]


def baseline_step(run: Comparison) -> None:
    """baseline: the tuned linear baseline's row (logistic / ridge regression on mean-pooled features)."""
    from .baseline import baseline_label, linear_baseline

    if not run.config.baseline or run.pairs:
        return
    linear = linear_baseline(run.features, run.table, run.probe, run.splits)
    label = baseline_label(run.table.task)
    _said(run, linear, label)
    run.rows.append(leaderboard_row(label, linear.spec, "frozen", linear.metric, linear.fold_metrics, linear.params,
                                    linear.seconds, linear.fold_detail, infer_ms_per_1k=linear.infer_ms_per_1k,
                                    dim=linear.dim))


def curve_step(run: Comparison) -> None:
    """learning curve (``sizes``): every pooler (and the baseline) trained again at each size, each fold's training
    rows subsampled (:func:`poolkit.training.curves.subsampled_splits`), its test rows kept; the board's rows are
    the last point."""
    from .baseline import baseline_label, linear_baseline
    from .curves import LearningCurve, subsampled_splits

    config = run.config
    if not config.sizes:
        return
    data = run.table.data if run.pairs else run.table
    full = int(np.median([len(train) for train, _ in run.splits]))
    points = [{"pooler": row["pooler"], "size": full, "subsampled": False,
               "fold_metrics": [m[row["metric"]] for m in row["fold_metrics"]]} for row in run.rows]
    ratios = {full: fold_size_ratio(run.splits)}
    for size in sorted(config.sizes):
        splits = subsampled_splits(data, run.splits, size, config.seed)
        labelled = [(result.label, result) for result in _probed(run, splits, timed=False)]
        if config.baseline and not run.pairs:
            labelled.append((baseline_label(run.table.task),
                             linear_baseline(run.features, run.table, run.probe, splits, timed=False)))
        points += [{"pooler": label, "size": size, "subsampled": True,
                    "fold_metrics": [m[result.metric] for m in result.fold_metrics]} for label, result in labelled]
        ratios[size] = fold_size_ratio(splits)
        label, best = labelled[0]  # the poolers come ranked
        run.report(f"  learning curve at {size} training rows per fold: best pooler {label} "
                   f"{mean_std(**best.summary())}")
    run.curve = LearningCurve(points, run.metric.name, run.metric.higher_is_better, ratios)


def export_step(run: Comparison, folder: str | Path, pooler: str | None, export_format: str,
                mode: str | None) -> None:
    """export: the best learned row (or ``pooler``'s, of ``mode``) refit on every row into ``folder``
    (:func:`poolkit.training.export.export_winner`), recorded in the settings."""
    from .export import export_winner

    info = export_winner(run, folder, pooler, export_format, mode)
    parity = info["parity_max_abs_diff"]
    run.settings["export"] = {"folder": str(folder), "format": export_format, "pooler": info["pooler_label"],
                              "mode": info["mode"], "epochs": info["epochs"], "rows": info["rows"],
                              "parity_max_abs_diff": parity}
    what = f"{info['pooler_label']}{' (fine-tuned)' if info['mode'] == 'finetuned' else ''}"
    run.report(f"exported {what} refit on all {info['rows']} rows ({counted(info['epochs'], 'epoch')}, the "
               f"median its folds chose) to {folder} ({export_format}"
               + (f"; parity {parity:.1e})" if parity is not None else "; the refit model's own folder)"))


def explain_step(run: Comparison) -> None:
    """explain: the best learned pooler's weights over a few of fold 0's held-out texts (see :func:`explain_best`)."""
    config = run.config
    run.explained = explain_best(run.results, run.features, run.table, config.model, config.max_length,
                                 config.trust_remote_code, config.seed)


def publish_step(run: Comparison, out: Path | None) -> Leaderboard:
    """publish: the leaderboard of the rows so far, written to ``out`` when given."""
    board = Leaderboard(run.rows, {**run.settings, "total_seconds": round(time.perf_counter() - run.started, 2)},
                        run.explained, run.curve)
    if out is not None:
        board.save(out)
    return board


def finetune_step(run: Comparison, out: Path | None, force: bool) -> None:
    """fine-tune: the encoder end-to-end with each of the ``finetune_top`` best poolers, on the probes' folds; the
    runs go to ``out/finetuned/<pooler>`` (without ``out``: a temporary folder)."""
    from ..models.encoders import remote_code
    from . import finetune
    from .cv import finetuned_row
    from .finetune_pairs import fit_pairs

    config = run.config
    with tempfile.TemporaryDirectory(prefix="poolkit-finetune-") as scratch:
        root = (out or Path(scratch)) / "finetuned"
        # a row trained with a projection names a pooler that fine-tuning would train without it
        for result in [r for r in run.results if not r.suffix][:config.finetune_top]:
            run.report(f"fine-tuning the encoder with {result.label} ({counted(config.folds, 'fold')}, "
                       f"{counted(config.finetune_epochs, 'epoch')})")
            trained = config.finetuning(result.spec, run.probe.val_fraction)
            started = time.perf_counter()
            fit = fit_pairs if run.pairs else finetune.fit
            with remote_code(config.trust_remote_code):
                metrics = fit(trained, run.table, root / result.label, force=force, progress=run.progress)
            run.rows.append(finetuned_row(result.label, result.spec, metrics, time.perf_counter() - started,
                                          flat=run.pairs))


def explain_best(results: Sequence[Any], features: Any, table: TableData, model: str | None, max_length: int,
                 trust_remote_code: bool = False, seed: int = 0) -> Any:
    """The best pooler with learned weights (``results`` ranked best first) explaining, with its fold-0 model, a
    few of fold 0's held-out texts: up to :data:`EXPLAINED_PER_CLASS` per class (other tasks:
    :data:`EXPLAINED_TEXTS`), drawn with ``seed``. Their hidden states come from the feature cache ``features``
    when it keeps the token states that pooler reads; otherwise these texts alone are encoded again. An
    :class:`~poolkit.explain.Explanation`, or None when no pooler has learned weights."""
    from ..explain import Explainer
    from ..models.encoders import load_tokenizer
    from .features import encode_features

    best = next((r for r in results if r.first_fold is not None
                 and any(True for _ in r.first_fold.model.pooler.parameters())), None)
    if best is None:
        return None
    fold = best.first_fold
    rng = np.random.default_rng(seed)
    if table.task == "classification":
        rows = np.concatenate([rng.choice(found, size=min(EXPLAINED_PER_CLASS, len(found)), replace=False)
                               for c in range(len(table.label_names))
                               if len(found := fold.test_rows[table.targets[fold.test_rows] == c])])
        targets, sample = [table.label_names[table.targets[i]] for i in rows], f"up to {EXPLAINED_PER_CLASS} per class"
    else:
        rows = np.sort(rng.choice(fold.test_rows, size=min(EXPLAINED_TEXTS, len(fold.test_rows)), replace=False))
        targets = [float(table.targets[i, 0]) for i in rows] if table.task == "regression" else None
        sample = "drawn at random"
    texts = [table.texts[i] for i in rows]
    layered = fold.model.pooler.kind == "layer"
    if not features.has_token_states(all_layers=layered):
        features, rows = encode_features(texts, model, max_length, cache=False, progress=False,
                                         trust_remote_code=trust_remote_code), np.arange(len(rows))
        read = "these texts encoded again (the feature cache keeps no token states for this pooler)"
    else:
        read = "read from the feature cache (no second encoder pass)"
    source = (f"{best.label}'s fold-0 model (pooler + head trained without fold 0's held-out rows, its epoch chosen "
              f"on an inner split of its training rows) on {len(texts)} of fold 0's held-out texts, {sample}; hidden "
              f"states {read}")
    explainer = Explainer.on_cached_states(fold, lambda at: features.batch(rows[at], all_layers=layered),
                                           load_tokenizer(model, trust_remote_code), max_length,
                                           table.label_names, source, list(table.target_cols))
    return explainer.explain(texts, targets)
