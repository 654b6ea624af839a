"""``evaluate`` and its metrics (poolkit.training.embedding_metrics): hand-computed rankings, and the figures of
sentence-transformers' own evaluators on the packaged MiniLM."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from poolkit import PoolkitError
from poolkit.cli import main
from poolkit.training.embedding_metrics import ranked, retrieval_metrics, similarity_metrics
from poolkit.training.evaluation import evaluate

#: documents 0..4 as orthogonal directions; a query's cosine with document j is its j-th coordinate
CORPUS = torch.eye(5)


def test_retrieval_metrics_of_known_rankings():
    # query 0 ranks document 1 first (relevant: {1}); query 1 ranks 3 second and 0 fourth (relevant: {0, 3}).
    # catches a DCG discount off by one rank, an ideal DCG over all documents instead of the relevant ones, MRR of
    # the last hit, AP divided by the hits found instead of min(100, relevant), and recall@k counting queries
    queries = torch.tensor([[0.1, 0.9, 0.2, 0.0, 0.0],
                            [0.2, 0.0, 0.9, 0.5, 0.3]])
    metrics = retrieval_metrics(queries, CORPUS, [{1}, {0, 3}])
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    assert metrics["ndcg@10"] == pytest.approx((1 + dcg / (1 + 1 / math.log2(3))) / 2)
    assert metrics["mrr@10"] == pytest.approx((1 + 1 / 2) / 2)
    assert metrics["map@100"] == pytest.approx((1 + (1 / 2 + 2 / 4) / 2) / 2)
    assert metrics["recall@1"] == pytest.approx(0.5) and metrics["recall@10"] == pytest.approx(1.0)


def test_ranking_breaks_ties_by_the_lower_document_index_and_reads_the_whole_corpus():
    # the ranking sentence-transformers uses; a depth beyond the corpus gives the whole corpus
    queries = torch.tensor([[0.0, 0.5, 0.5, 0.5, 0.1]])
    assert ranked(queries, CORPUS, 100).tolist() == [[1, 2, 3, 4, 0]]
    assert ranked(queries, CORPUS, 2).tolist() == [[1, 2]]


def test_similarity_metrics_are_the_correlations_of_the_cosines():
    left = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    right = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 0.2]])
    scores = np.array([5.0, 3.0, 2.0, 0.0])  # the cosines' order: Spearman 1
    metrics = similarity_metrics(left, right, scores)
    cosine = [1.0, 1 / math.sqrt(2), 0.0, -1 / math.sqrt(1.04)]
    assert metrics["spearman"] == pytest.approx(1.0)
    assert metrics["pearson"] == pytest.approx(np.corrcoef(cosine, scores)[0, 1])


def _glosses(count: int) -> pd.DataFrame:
    """WordNet noun glosses (queries) and their first lemmas (documents): data no one here wrote."""
    from poolkit.data.builtin import read_wordnet

    synsets = read_wordnet("noun")[1000:1000 + count]
    return pd.DataFrame({"text": [s.gloss for s in synsets], "pair": [s.lemma.replace("_", " ") for s in synsets]})


@pytest.mark.slow
def test_evaluate_equals_sentence_transformers_on_the_packaged_minilm():
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import (EmbeddingSimilarityEvaluator,
                                                                         InformationRetrievalEvaluator)
    from sentence_transformers.util import cos_sim

    from poolkit.data.pairs import load_pairs
    from poolkit.models.encoders import resolve_model

    table = _glosses(300)
    ours = evaluate(table, "retrieval", pooler="mean", batch_size=32, progress=False)
    data = load_pairs(table, "retrieval")
    model = SentenceTransformer(resolve_model(None), device="cpu")
    theirs = InformationRetrievalEvaluator(
        {f"q{i}": q for i, q in enumerate(data.queries)}, {f"d{i}": d for i, d in enumerate(data.corpus)},
        {f"q{i}": {f"d{j}" for j in wanted} for i, wanted in enumerate(data.relevant)},
        score_functions={"cosine": cos_sim}, write_csv=False)(model)
    names = {"ndcg@10": "cosine_ndcg@10", "mrr@10": "cosine_mrr@10", "map@100": "cosine_map@100",
             "recall@1": "cosine_recall@1", "recall@10": "cosine_recall@10"}
    for ours_name, their_name in names.items():
        assert abs(ours["metrics"][ours_name] - theirs[their_name]) <= 0.005, (ours_name, ours["metrics"], theirs)
    assert 0.2 < ours["metrics"]["ndcg@10"] < 1  # a real ranking, not a degenerate one

    pairs = pd.DataFrame({"text": table["text"][:150].tolist(), "pair": table["text"][150:].tolist(),
                          "score": np.arange(150) % 6})
    pairs.loc[::3, "pair"] = table["pair"][:150:3].tolist()  # some pairs related, most not
    ours = evaluate(pairs, "similarity", progress=False)
    theirs = EmbeddingSimilarityEvaluator(pairs["text"].tolist(), pairs["pair"].tolist(), pairs["score"].tolist(),
                                          write_csv=False)(model)
    assert abs(ours["metrics"]["spearman"] - theirs["spearman_cosine"]) <= 0.005
    assert abs(ours["metrics"]["pearson"] - theirs["pearson_cosine"]) <= 0.005


def test_shuffled_pairs_score_near_chance(model_dir):
    # documents paired with the wrong queries: nothing to find, so the figures are those of a random ranking
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(list("abcdefghij"), 6)) for _ in range(60)]
    table = pd.DataFrame({"text": texts, "pair": list(rng.permutation(texts))})
    result = evaluate(table, "retrieval", model=model_dir, progress=False)
    assert result["queries"] == 60 and result["corpus"] == 60
    assert result["metrics"]["recall@10"] < 0.4 and result["metrics"]["ndcg@10"] < 0.3


def test_the_command_prints_and_writes_the_metrics_and_refuses_bad_input(capsys, tmp_path, model_dir):
    data = tmp_path / "pairs.csv"
    pd.DataFrame({"query": ["a cat", "a dog", "a car"], "doc": ["cats purr", "dogs bark", "cars drive"]}).to_csv(
        data, index=False)
    out = tmp_path / "metrics.json"
    argv = ["evaluate", "--data", str(data), "--task", "retrieval", "--text-col", "query", "--pair-col", "doc",
            "--model", model_dir, "--out", str(out), "--quiet"]
    assert main(argv) == 0
    written = json.loads(out.read_text())
    assert set(written["metrics"]) == {"ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10"}
    assert written["metrics"]["recall@10"] == 1.0  # 3 documents: every one is in the top 10
    assert "3 queries, 3 documents" in capsys.readouterr().out
    assert main(argv) == 2  # never overwritten without --force
    assert "already exists" in capsys.readouterr().err
    assert main([*argv[:-3], "--pair-col", "document", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "column 'document' not found" in err and "--pair-col" in err and "Traceback" not in err
    with pytest.raises(PoolkitError, match="unknown evaluate setting 'batch'"):
        evaluate(data, "retrieval", text_col="query", pair_col="doc", batch=4)


def test_dims_score_truncations_of_vectors_encoded_once(model_dir, capsys, tmp_path):
    # each row of by_dim is what `dim` alone gives (truncation before the cosine); the full width is `metrics`;
    # catches the last dimensions kept, a normalisation before truncating, and folds of by_dim mixed up
    table = _glosses(40)
    result = evaluate(table, "retrieval", model=model_dir, dims=[16, 8, 32], progress=False)
    assert [row["dim"] for row in result["by_dim"]] == [8, 16, 32]
    assert result["by_dim"][-1]["metrics"] == result["metrics"]
    for row in result["by_dim"][:2]:
        alone = evaluate(table, "retrieval", model=model_dir, dim=row["dim"], progress=False)["metrics"]
        assert row["metrics"] == pytest.approx(alone, abs=1e-6)
    with pytest.raises(PoolkitError, match="`dims` go up to 64 but the pooler gives 32 dimensions"):
        evaluate(table, "retrieval", model=model_dir, dims=[64], progress=False)
    with pytest.raises(PoolkitError, match="leave `dim` out"):
        evaluate(table, "retrieval", model=model_dir, dims=[8], dim=16, progress=False)
    data = tmp_path / "pairs.csv"
    table.to_csv(data, index=False)
    assert main(["evaluate", "--data", str(data), "--task", "retrieval", "--model", model_dir, "--dims", "8,16",
                 "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "first 8 dims: ndcg@10" in printed and "first 16 dims" in printed
    assert main(["evaluate", "--data", str(data), "--task", "retrieval", "--model", model_dir, "--dims", "8,x"]) == 2
    assert "--dims takes whole numbers" in capsys.readouterr().err


def test_quantized_search_ranks_by_hamming_distance_and_by_codes_and_rescoring_reads_float32_queries():
    """Binary kinds rank by Hamming distance (counted here on the packed bits with XOR), int8 / uint8 by the dot
    product of integer codes calibrated on the corpus, and rescoring every candidate ranks the whole corpus by the
    float32 query against the dequantised documents (catches ranges taken from the queries, a bit order that
    differs between queries and corpus, rescoring with quantised queries or float documents)."""
    from poolkit import quantize
    from poolkit.quantization import dequantize, quantization_ranges
    from poolkit.training.embedding_metrics import quantized_retrieval_metrics, ranking_metrics

    gen = torch.Generator().manual_seed(0)
    corpus = torch.nn.functional.normalize(torch.randn(150, 24, generator=gen), dim=-1)
    queries = torch.nn.functional.normalize(corpus[:40] + 0.6 * torch.randn(40, 24, generator=gen), dim=-1)
    relevant = [{i} for i in range(40)]

    def metrics_of(scores: np.ndarray) -> dict:  # rank each row by score, ties to the lower index
        order = np.lexsort((np.broadcast_to(np.arange(scores.shape[1]), scores.shape), -scores), axis=1)
        return ranking_metrics(order[:, :100], relevant)

    bits_q, bits_c = quantize(queries, "ubinary"), quantize(corpus, "ubinary")
    hamming = np.unpackbits(bits_q[:, None, :] ^ bits_c[None, :, :], axis=-1).sum(-1)
    for kind in ("binary", "ubinary"):
        assert quantized_retrieval_metrics(queries, corpus, relevant, kind) == pytest.approx(metrics_of(-hamming))
    ranges = quantization_ranges(corpus.numpy())
    for kind in ("int8", "uint8"):
        codes_q = quantize(queries, kind, ranges=ranges).astype(np.int64)
        codes_c = quantize(corpus, kind, ranges=ranges).astype(np.int64)
        assert quantized_retrieval_metrics(queries, corpus, relevant, kind) == pytest.approx(
            metrics_of((codes_q @ codes_c.T).astype(float)))
        stored = dequantize(quantize(corpus, kind, ranges=ranges), kind, 24, ranges=ranges)
        rescored = quantized_retrieval_metrics(queries, corpus, relevant, kind, rescore=2)  # 200 >= the corpus
        assert rescored == pytest.approx(metrics_of(queries.numpy().astype(np.float64) @ stored.T.astype(np.float64)))
    float_metrics = retrieval_metrics(queries, corpus, relevant)
    assert quantized_retrieval_metrics(queries, corpus, relevant, "int8", rescore=2)["ndcg@10"] == pytest.approx(
        float_metrics["ndcg@10"], abs=0.05)


def test_dequantize_matches_sentence_transformers_rescoring_and_binary_dots_count_hamming():
    st_quantization = pytest.importorskip("sentence_transformers.util.quantization")
    from poolkit import quantize
    from poolkit.quantization import dequantize, quantization_ranges

    vectors = np.random.default_rng(1).normal(size=(30, 12)).astype(np.float32)
    ranges = quantization_ranges(vectors)
    for kind in ("int8", "uint8"):
        codes = quantize(vectors, kind, ranges=ranges)
        np.testing.assert_allclose(dequantize(codes, kind, 12, ranges=ranges),
                                   st_quantization._dequantize_embeddings(codes.astype(int), kind, ranges), rtol=1e-6)
    signs = dequantize(quantize(vectors, "binary"), "binary", 12)
    np.testing.assert_array_equal(signs, np.where(vectors > 0, 1.0, -1.0))


def test_evaluate_quantize_and_query_prompts(model_dir, tmp_path, capsys):
    """by_quantize holds each kind with and without rescoring; a query prompt goes before the queries only (equal to
    encoding the two sides apart by hand); what is refused."""
    from poolkit.models.text_encoder import TextEncoder

    table = _glosses(40)
    result = evaluate(table, "retrieval", model=model_dir, quantize=["int8", "binary"], progress=False)
    assert [row["kind"] for row in result["by_quantize"]] == ["int8", "binary"]
    assert all(set(row) == {"kind", "rescore", "metrics", "rescored"} for row in result["by_quantize"])
    prompted = evaluate(table, "retrieval", model=model_dir, query_prompt="the cat ", progress=False)
    encoder = TextEncoder(model_dir)
    pairs = __import__("poolkit.data.pairs", fromlist=["load_pairs"]).load_pairs(table, "retrieval")
    by_hand = retrieval_metrics(encoder.encode(pairs.queries, prompt="the cat "), encoder.encode(pairs.corpus),
                                pairs.relevant)
    assert prompted["metrics"] == pytest.approx(by_hand, abs=1e-6) and prompted["metrics"] != result["metrics"]
    with pytest.raises(PoolkitError, match="`quantize` scores retrieval"):
        evaluate(table.assign(score=1.0), "similarity", model=model_dir, quantize=["int8"], progress=False)
    with pytest.raises(PoolkitError, match="`quantize` takes kinds from"):
        evaluate(table, "retrieval", model=model_dir, quantize=["int4"], progress=False)
    data = tmp_path / "pairs.csv"
    table.to_csv(data, index=False)
    assert main(["evaluate", "--data", str(data), "--task", "retrieval", "--model", model_dir, "--quantize",
                 "ubinary", "--rescore", "2", "--quiet"]) == 0
    assert "ubinary, top 2 x 100 rescored in float32: ndcg@10" in capsys.readouterr().out


def leave_one_out(estimator, vectors: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """scikit-learn's prediction of every row by the estimator fitted on the other rows."""
    from sklearn.model_selection import LeaveOneOut, cross_val_predict

    return cross_val_predict(estimator, vectors, targets, cv=LeaveOneOut())


def test_neighbour_votes_are_scikit_learns_leave_one_out_k_nearest_neighbours():
    # catches a row voting for itself, neighbours by dot product or distance instead of cosine, ties not going to
    # the lower class, and a regression mean over the wrong axis
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

    from poolkit.training.embedding_metrics import neighbour_outputs

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(60, 6)) * rng.uniform(0.1, 10, size=(60, 1))  # norms differ: cosine matters
    labels = rng.integers(0, 3, size=60)
    for k in (1, 4, 7):
        ours = neighbour_outputs(torch.from_numpy(vectors), labels, "classification", k, 3).argmax(axis=1)
        theirs = leave_one_out(KNeighborsClassifier(k, metric="cosine", algorithm="brute"), vectors, labels)
        assert ours.tolist() == theirs.tolist()
    targets = rng.normal(size=(60, 2))
    ours = neighbour_outputs(torch.from_numpy(vectors), targets, "regression", 5)
    theirs = leave_one_out(KNeighborsRegressor(5, metric="cosine", algorithm="brute"), vectors, targets)
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_neighbour_outputs_for_multilabel_and_their_class_scores():
    # rows 0-3 on one axis, 4-5 on another: each of rows 0-3 has the other three as its 3 neighbours
    from poolkit.training.embedding_metrics import neighbour_outputs

    vectors = torch.tensor([[1.0, 0.0]] * 4 + [[0.0, 1.0]] * 2) + torch.arange(6.0)[:, None] * 1e-3
    labels = np.array([[1, 0], [1, 1], [1, 1], [0, 0], [0, 1], [0, 1]], dtype=np.float32)
    logits = neighbour_outputs(vectors, labels, "multilabel", 3)
    share = 1 / (1 + np.exp(-logits))
    # row 0's neighbours 1, 2, 3 have label 0 twice and label 1 twice: (2 + 1/2) / 4 each
    np.testing.assert_allclose(share[0], [2.5 / 4, 2.5 / 4])
    np.testing.assert_allclose(share[3], [3.5 / 4, 2.5 / 4])
    classes = neighbour_outputs(vectors, np.array([0, 0, 1, 1, 2, 2]), "classification", 3, 3)
    np.testing.assert_allclose(np.exp(classes[0]), [(1 + 1) / 6, (2 + 1) / 6, (0 + 1) / 6])  # votes + 1 per class


@pytest.fixture
def labelled(tmp_path):
    """A classification table of 24 texts over three labels (a word per label in each text), as a CSV."""
    rng = np.random.default_rng(3)
    words = ["the", "cat", "sat", "on", "mat", "dog", "ran"]
    cues = {"red": "good", "blue": "bad", "green": "film"}
    rows = [(" ".join([*rng.choice(words, 3), cues[label]]), label) for label in ["red", "blue", "green"] * 8]
    path = tmp_path / "labelled.csv"
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, index=False)
    return path


def test_evaluate_scores_a_classification_table_by_the_embeddings_nearest_neighbours(model_dir, labelled):
    # an encoder has no head: each row is predicted from its k most cosine-similar other rows (catches metrics on
    # the wrong vectors, another pooler than the one asked for, and labels read in another order than the table's)
    from sklearn.neighbors import KNeighborsClassifier

    from poolkit.models.text_encoder import TextEncoder

    result = evaluate(labelled, "classification", model=model_dir, pooler="max", neighbours=3, progress=False)
    assert (result["method"], result["neighbours"], result["rows"], result["task"]) == ("knn", 3, 24,
                                                                                        "classification")
    assert set(result["metrics"]) == {"accuracy", "macro_f1", "log_loss"} and result["pooler"]["name"] == "max"
    frame = pd.read_csv(labelled)
    vectors = TextEncoder(model_dir, "max").encode(list(frame["text"])).numpy()
    names = sorted(set(frame["label"]))
    ids = np.array([names.index(label) for label in frame["label"]])
    theirs = leave_one_out(KNeighborsClassifier(3, metric="cosine", algorithm="brute"), vectors, ids)
    assert result["metrics"]["accuracy"] == pytest.approx(float((theirs == ids).mean()))


def test_evaluate_on_a_table_refuses_what_it_cannot_score_before_any_encoding(model_dir, labelled):
    with pytest.raises(PoolkitError, match="has no head that predicts classification .* or score its embeddings"):
        evaluate(labelled, "classification", model=model_dir, method="head")
    with pytest.raises(PoolkitError, match="`neighbours` 24 needs more rows than that: the table has 24"):
        evaluate(labelled, "classification", model=model_dir, neighbours=24)
    with pytest.raises(PoolkitError, match="`dims`, `quantize` and .* leave them out for classification"):
        evaluate(labelled, "classification", model=model_dir, dims=[8])
    with pytest.raises(PoolkitError, match="`method` must be one of head, knn, got 'svm'"):
        evaluate(labelled, "classification", model=model_dir, method="svm")
    with pytest.raises(PoolkitError, match="`method` picks how a .* table is scored: leave it out for similarity"):
        evaluate(labelled, "similarity", model=model_dir, method="knn")
    with pytest.raises(PoolkitError, match="`negative_col` .*"):
        evaluate(labelled, "classification", model=model_dir, negative_col="x")
    with pytest.raises(PoolkitError, match="regression target .label. is missing or not a finite number in 24 rows"):
        evaluate(labelled, "regression", model=model_dir)


def test_the_evaluate_command_scores_a_classification_table(model_dir, labelled, tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["evaluate", "--data", str(labelled), "--task", "classification", "--model", model_dir,
                 "--neighbours", "3", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "on 24 rows (3 nearest neighbours, leave one out): accuracy" in printed
    assert json.loads(out.read_text())["method"] == "knn"
    assert main(["evaluate", "--data", str(labelled), "--task", "classification", "--model", model_dir,
                 "--method", "head"]) == 2
    assert "has no head that predicts classification" in capsys.readouterr().err
