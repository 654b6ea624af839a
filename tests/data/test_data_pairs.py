"""Tables of pairs for the embedding tasks (poolkit.data.pairs): what counts as a query, a document and a relevance,
and the one-line errors before any encoding."""

from __future__ import annotations

import pandas as pd
import pytest

from poolkit import PoolkitError
from poolkit.data.pairs import load_pairs

TABLE = pd.DataFrame({"text": ["q1", "q2", "q1", "q2", "q3"],
                      "pair": ["d1", "d2", "d3", "d2", "d1"],
                      "neg": ["d4", "d1", "d5", "d1", "d2"]})


def test_queries_and_documents_are_identified_by_their_text():
    # catches a duplicated row counted twice, a shared document encoded twice, a second relevant document of the
    # same query dropped, and negatives or corpus documents left out of the corpus
    data = load_pairs(TABLE, "retrieval", negative_col="neg", corpus=["d6", "d1"])
    assert data.queries == ["q1", "q2", "q3"]
    assert data.corpus == ["d1", "d2", "d3", "d4", "d5", "d6"]
    assert data.relevant == [{0, 2}, {1}, {0}] and data.pairs == 4


def test_a_corpus_file_adds_documents_from_its_pair_column(tmp_path):
    path = tmp_path / "corpus.csv"
    pd.DataFrame({"pair": ["d9", "d1"], "other": [1, 2]}).to_csv(path, index=False)
    assert load_pairs(TABLE, "retrieval", corpus=path).corpus == ["d1", "d2", "d3", "d9"]


def test_similarity_reads_two_texts_and_a_score(tmp_path):
    path = tmp_path / "sts.csv"
    pd.DataFrame({"a": ["x", "y"], "b": ["z", "w"], "gold": [4.5, 0]}).to_csv(path, index=False)
    data = load_pairs(path, "similarity", text_col="a", pair_col="b", target_col="gold")
    assert data.left == ["x", "y"] and data.right == ["z", "w"] and data.scores.tolist() == [4.5, 0.0]


@pytest.mark.parametrize("frame, task, options, message", [
    (TABLE, "retrieval", {"pair_col": "doc"}, "column 'doc' not found in the table .* pass the right `pair_col`"),
    (TABLE.assign(pair=["d1", "", "d3", "d2", "d1"]), "retrieval", {}, "'pair' is empty or whitespace-only in 1 row "
     r"\(2; row 1"),
    (TABLE.assign(pair=["d1", None, "d3", "d2", "d1"]), "retrieval", {}, "'pair' is empty"),
    (TABLE, "retrieval", {"pair_col": "text"}, "one column plays two parts"),
    (pd.DataFrame({"text": ["a", "b"], "pair": ["c", "d"], "score": [1.0, "high"]}), "similarity", {},
     r"similarity score 'score' is missing or not a finite number in 1 row \(2; row 1"),
    (TABLE, "similarity", {"negative_col": "neg"}, "`negative_col` and `corpus` are for retrieval"),
    (TABLE, "classification", {}, "`task` for pairs must be one of retrieval, similarity"),
])
def test_bad_tables_fail_in_one_line_naming_the_column(frame, task, options, message):
    with pytest.raises(PoolkitError, match=message):
        load_pairs(frame, task, **options)
