"""compare for embeddings (poolkit.training.contrastive): the losses, folds by query, ranking against the whole
corpus, epoch 0 as a candidate, and no leakage from a fold's test pairs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.nn import functional as F

from poolkit import PoolkitError
from poolkit.data.pairs import RetrievalData, SimilarityData, load_pairs, pair_folds, pair_split
from poolkit.training import contrastive
from poolkit.training.config import ProbeConfig
from poolkit.training.contrastive import PairLayout, compare_pair_poolers, cosent_loss, ranking_loss
from poolkit.training.features import FeatureCache

SIGNAL, NOISE, NOISE_SD = 8, 24, 2.0


def synthetic(queries: int = 120, shuffled: bool = False, length: int = 3, seed: int = 0
              ) -> tuple[FeatureCache, PairLayout]:
    """Query i and its document share 8 signal dimensions; 24 dimensions of loud noise of their own hide it from the
    cosine (zero-shot pooling is near chance, a learned projection can drop the noise). ``shuffled``: each query
    paired with another query's document, so nothing can be learned about held-out queries."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((queries, SIGNAL))

    def texts_features() -> np.ndarray:  # (queries, length, D): the signal on every token, noise of its own
        noise = NOISE_SD * rng.standard_normal((queries, length, NOISE))
        return np.concatenate([np.repeat(base[:, None], length, 1), noise], axis=2)

    features = np.concatenate([texts_features(), texts_features()])  # queries, then documents
    tokens = np.repeat(features.reshape(1, -1, SIGNAL + NOISE), 2, axis=0).astype(np.float16)  # 2 "layers"
    cache = FeatureCache(Path("unused"), tokens, np.arange(0, 2 * queries * length + 1, length), {})
    partner = rng.permutation(queries) if shuffled else np.arange(queries)
    data = RetrievalData([f"q{i}" for i in range(queries)], [f"d{j}" for j in range(queries)],
                         [{int(partner[i])} for i in range(queries)], queries, [set() for _ in range(queries)])
    layout = PairLayout.of(data)
    assert layout.first.tolist() == list(range(queries)) and layout.second.tolist() == list(range(queries, 2 * queries))
    return cache, layout


def chance_ndcg(corpus: int) -> float:
    """The expected nDCG@10 of one relevant document ranked at random among ``corpus``."""
    return sum(1 / math.log2(rank + 1) for rank in range(1, 11)) / corpus


def test_ranking_loss_is_cross_entropy_over_the_batch_documents_without_the_left_out_ones():
    # query 0's positive is column 0; column 2 is also relevant to it, so it is left out rather than pushed away.
    # catches a temperature other than 1/20, dot products instead of cosines, and false negatives counted
    queries = torch.tensor([[1.0, 0.1], [0.2, 2.0]], dtype=torch.float64)
    documents = torch.tensor([[1.0, 0.9], [1.0, 1.1], [0.9, 1.0]], dtype=torch.float64)
    left_out = torch.tensor([[False, False, True], [False, False, False]])
    loss = ranking_loss(queries, documents, torch.tensor([0, 1]), left_out)
    cosine = F.normalize(queries, dim=-1) @ F.normalize(documents, dim=-1).T
    first = -20 * cosine[0, 0] + torch.logsumexp(20 * cosine[0, :2], 0)
    second = -20 * cosine[1, 1] + torch.logsumexp(20 * cosine[1], 0)
    assert loss.item() > 0.1 and loss.item() == pytest.approx(((first + second) / 2).item(), rel=1e-9)


def test_cosent_loss_counts_the_pairs_whose_cosines_are_in_the_wrong_order():
    left = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    right = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])  # cosines 1, 0.707, 0
    cosine = torch.tensor([1.0, 1 / math.sqrt(2), 0.0])
    # scores 0 < 1 < 2: all three pairs of pairs are in the wrong order (higher score, lower cosine)
    wrong = [20 * (cosine[j] - cosine[i]) for i, j in ((1, 0), (2, 0), (2, 1))]
    expected = torch.log(1 + sum(torch.exp(w) for w in wrong))
    assert cosent_loss(left, right, torch.tensor([0.0, 1.0, 2.0])).item() == pytest.approx(expected.item(), rel=1e-6)
    # the cosines' own order: every term has the opposite sign, and ties add nothing
    right_order = torch.log(1 + sum(torch.exp(-w) for w in wrong))
    assert cosent_loss(left, right, torch.tensor([2.0, 1.0, 0.0])).item() == pytest.approx(right_order.item(), rel=1e-5)
    assert right_order < 0.01 < expected
    assert cosent_loss(left, right, torch.tensor([1.0, 1.0, 1.0])).item() == pytest.approx(0.0, abs=1e-7)


def test_folds_keep_a_query_or_a_first_text_on_one_side_and_test_each_unit_once():
    frame = pd.DataFrame({"text": ["a", "a", "b", "c", "c", "c", "d", "e", "f", "g"],
                          "pair": ["1", "2", "3", "4", "5", "6", "7", "8", "9", "1"],
                          "score": np.arange(10.0)})
    retrieval = load_pairs(frame, "retrieval")
    similarity = load_pairs(frame, "similarity")
    assert len(retrieval) == 7 and len(similarity) == 10
    for data in (retrieval, similarity):
        splits = pair_folds(data, 3, seed=1)
        tested = np.concatenate([test for _, test in splits])
        assert sorted(tested.tolist()) == list(range(len(data)))
        for train, test in splits:
            assert not set(data.groups[train]) & set(data.groups[test])
            kept, held = pair_split(data, train, 0.3, seed=2)
            assert sorted([*kept, *held]) == sorted(train) and not set(data.groups[kept]) & set(data.groups[held])
    assert similarity.groups[0] == similarity.groups[1] and similarity.groups[3] == similarity.groups[5]
    with pytest.raises(PoolkitError, match="7 queries are too few for 4 folds"):
        pair_folds(retrieval, 4)


def test_hard_negatives_join_the_corpus_and_are_never_a_relevant_text():
    frame = pd.DataFrame({"text": ["a", "a", "b"], "pair": ["1", "2", "3"], "neg": ["2", "9", "1"]})
    data = load_pairs(frame, "retrieval", negative_col="neg")
    assert data.corpus == ["1", "2", "3", "9"]
    assert data.negatives == [{3}, {0}]  # query a's "2" is relevant to it: no negative


def test_a_learned_projection_finds_the_hidden_signal_that_zero_shot_pooling_misses():
    """The positive control: training must help where the frozen pooling is weak (it scores about 0.2 there, the
    projection about 0.48 after 10 epochs)."""
    cache, layout = synthetic()
    config = ProbeConfig(folds=3, epochs=10, patience=10, pooler_lr=0.1, batch_size=16, projection=True)
    results = {r.label: r for r in compare_pair_poolers([{"name": "mean"}], cache, layout, config)}
    zero_shot, learned = results["mean"].summary()["mean"], results["mean+projection"].summary()["mean"]
    assert zero_shot < 0.3 and learned > zero_shot + 0.15, (zero_shot, learned)
    assert all(d["best_epoch"] == 0 and d["epochs_run"] == 0 for d in results["mean"].fold_detail)
    assert results["mean"].params == 0 and results["mean+projection"].params == 32 * 32 + 32


def test_shuffled_pairs_score_chance_for_every_learned_pooler():
    """Pairs with no signal: a model chosen or trained with a fold's test queries would score above chance; the
    inner split keeps every learned row within three standard errors of chance (each fold ranks its test queries
    against the whole corpus of 120)."""
    cache, layout = synthetic(shuffled=True)
    config = ProbeConfig(folds=4, epochs=12, patience=12, pooler_lr=5e-2, batch_size=16, projection=True)
    specs = [{"name": "mean"}, {"name": "attention", "attn_size": 16}, {"name": "weighted_layer"}]
    chance = chance_ndcg(120)
    # the sd of one query's nDCG@10 under a random rank, over 120 queries
    spread = math.sqrt(sum(1 / math.log2(r + 1) ** 2 for r in range(1, 11)) / 120 - chance ** 2) / math.sqrt(120)
    for result in compare_pair_poolers(specs, cache, layout, config):
        folds = result.fold_metrics
        overall = np.mean([m["ndcg@10"] for m in folds])  # equal folds of 30 queries
        assert overall < chance + 3 * spread, (result.label, overall, chance)


def test_a_fold_trains_only_on_its_training_queries_and_chooses_on_their_inner_split(monkeypatch):
    cache, layout = synthetic(queries=60)
    seen: list[np.ndarray] = []
    real = contrastive.batch_loss
    monkeypatch.setattr(contrastive, "batch_loss",
                        lambda model, cache, layout, batch: (seen.append(batch.copy()), real(model, cache, layout,
                                                                                            batch))[1])
    scored: list[np.ndarray] = []
    real_metrics = contrastive.unit_metrics
    monkeypatch.setattr(contrastive, "unit_metrics",
                        lambda layout, units, embed: (scored.append(np.asarray(units).copy()),
                                                      real_metrics(layout, units, embed))[1])
    config = ProbeConfig(folds=3, epochs=2, patience=5, batch_size=8)
    train, test = pair_folds(layout.data, 3, config.val_fraction, config.seed)[1]
    contrastive.train_pair_fold({"name": "attention", "attn_size": 8}, cache, layout, train, test, config, seed=5,
                                learned=True)
    fit, val = pair_split(layout.data, train, config.val_fraction, 5)
    trained = np.concatenate(seen)
    assert set(trained[:, 0]) == set(fit.tolist())  # every fit query, and no validation or test query
    assert all(d in layout.data.relevant[q] for q, d in trained)
    assert [u.tolist() for u in scored] == [val.tolist()] * 3 + [test.tolist()]  # epochs 0, 1, 2, then the test


def test_epoch_0_is_kept_when_training_cannot_beat_it():
    # documents = their queries: mean pooling is already perfect on the inner split, so nothing beats epoch 0
    cache, layout = synthetic(queries=40)
    tokens = np.array(cache.tokens)
    tokens[:, 40 * 3:] = tokens[:, :40 * 3]
    cache = FeatureCache(Path("unused"), tokens, cache.offsets, {})
    config = ProbeConfig(folds=2, epochs=3, patience=3, pooler_lr=0.5, batch_size=8)
    results = {r.label: r for r in compare_pair_poolers([{"name": "mean"}, {"name": "attention", "attn_size": 8}],
                                                        cache, layout, config)}
    attention = results["attention(attn_size=8)"]
    assert [d["best_epoch"] for d in attention.fold_detail] == [0, 0]
    for fold_mean, fold_attention in zip(results["mean"].fold_metrics, attention.fold_metrics):
        assert fold_attention == pytest.approx(fold_mean)


def test_similarity_pairs_train_with_cosent():
    cache, layout = synthetic(queries=90)
    data = layout.data
    scores = np.array([float(next(iter(data.relevant[i]))) for i in range(90)])  # a graded score per pair
    similarity = SimilarityData(data.queries, [data.corpus[int(s)] for s in scores], scores % 5)
    pairs = PairLayout.of(similarity)
    assert pairs.first.tolist() == list(range(90)) and pairs.second.tolist() == list(range(90, 180))
    config = ProbeConfig(folds=3, epochs=2, patience=2, batch_size=16)
    (result,) = compare_pair_poolers([{"name": "attention", "attn_size": 8}], cache, pairs, config)
    assert result.metric == "spearman" and set(result.fold_metrics[0]) == {"spearman", "pearson"}
    assert all(np.isfinite(m["spearman"]) for m in result.fold_metrics)


@pytest.fixture(scope="module")
def gloss_pairs(tmp_path_factory) -> Path:
    """WordNet noun glosses and their first lemmas, as a CSV of pairs."""
    from poolkit.data.builtin import read_wordnet

    synsets = read_wordnet("noun")[2000:2090]
    path = tmp_path_factory.mktemp("pairs") / "pairs.csv"
    pd.DataFrame({"query": [s.gloss for s in synsets], "doc": [s.lemma.replace("_", " ") for s in synsets]}).to_csv(
        path, index=False)
    return path


def test_compare_zero_shot_folds_rank_against_the_whole_corpus_like_evaluate(model_dir, gloss_pairs, tmp_path):
    """The query-weighted mean of the zero-shot mean row's fold figures is evaluate's whole-table figure: each fold
    ranks its test queries against every document (ranking against the fold's own documents would score higher)."""
    from poolkit.training.compare import compare
    from poolkit.training.evaluation import evaluate

    board = compare(gloss_pairs, task="retrieval", text_col="query", pair_col="doc", poolers="mean,attention",
                    model=model_dir, folds=3, epochs=2, cache_dir=tmp_path / "cache", out=tmp_path / "run",
                    progress=False)
    rows = {row["pooler"]: row for row in board.rows}
    assert set(rows) == {"mean", "attention"}
    whole = evaluate(gloss_pairs, "retrieval", model=model_dir, text_col="query", pair_col="doc", progress=False)
    sizes = [len(test) for _, test in pair_folds(load_pairs(gloss_pairs, "retrieval", text_col="query",
                                                            pair_col="doc"), 3, 0.2, 0)]
    for name in ("ndcg@10", "mrr@10", "recall@10"):
        pooled = np.average([m[name] for m in rows["mean"]["fold_metrics"]], weights=sizes)
        assert pooled == pytest.approx(whole["metrics"][name], abs=2e-3), name
        assert rows["mean"][name] == pytest.approx(np.mean([m[name] for m in rows["mean"]["fold_metrics"]]))
    assert rows["mean"]["params"] == 0 and rows["attention"]["params"] > 0
    assert {d["best_epoch"] for d in rows["mean"]["fold_detail"]} == {0}
    saved = json.loads((tmp_path / "run" / "leaderboard.json").read_text())
    assert saved["settings"]["queries"] == 90 and saved["settings"]["metric"] == "ndcg@10"
    assert "baseline" not in {row["pooler"] for row in saved["rows"]}


def test_compare_fine_tunes_the_best_pooler_on_the_same_folds(model_dir, gloss_pairs, tmp_path):
    from poolkit.training.compare import compare

    board = compare(gloss_pairs, task="retrieval", text_col="query", pair_col="doc", poolers="mean,max",
                    model=model_dir, folds=2, finetune_top=1, finetune_epochs=1, cache_dir=tmp_path / "cache",
                    out=tmp_path / "run", progress=False)
    frozen = next(row for row in board.rows if row["mode"] == "frozen" and row["rank"] == 1)
    tuned = next(row for row in board.rows if row["mode"] == "finetuned")
    assert tuned["pooler"] == frozen["pooler"] and tuned["ndcg@10"] == tuned["mean"] and "mrr@10" in tuned
    metrics = json.loads((tmp_path / "run" / "finetuned" / tuned["pooler"] / "metrics.json").read_text())
    data = load_pairs(gloss_pairs, "retrieval", text_col="query", pair_col="doc")
    for k, (_, test) in enumerate(pair_folds(data, 2, 0.2, 0)):  # the probes' folds: the same test queries
        saved = np.load(tmp_path / "run" / "finetuned" / tuned["pooler"] / f"fold_{k}" / "test_outputs.npz")
        assert saved["test_rows"].tolist() == test.tolist()
    assert len(metrics["folds"]) == 2


def test_compare_refuses_what_it_cannot_do_for_pairs_before_any_work(gloss_pairs, model_dir):
    from poolkit.training.compare import compare

    with pytest.raises(PoolkitError, match="column 'pair' not found"):
        compare(gloss_pairs, task="retrieval", text_col="query", model=model_dir)
    with pytest.raises(PoolkitError, match="are for `task` retrieval"):
        compare(gloss_pairs, task="classification", negative_col="doc")
