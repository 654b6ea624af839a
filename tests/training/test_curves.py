"""Learning curves of compare --sizes (poolkit.training.curves)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from poolkit import PoolkitError
from poolkit.data.pairs import load_pairs, pair_folds
from poolkit.data.tables import load_table, repeated_folds
from poolkit.training import api
from poolkit.training.curves import LearningCurve, subsampled_splits
from tiny_models import tiny_bert_dir


@pytest.fixture
def table(tmp_path):
    pd.DataFrame({"text": [f"t{i}" for i in range(60)], "label": ["a"] * 40 + ["b"] * 20}).to_csv(tmp_path / "t.csv")
    return load_table(tmp_path / "t.csv")


def test_subsampled_training_rows_are_a_stratified_part_of_the_folds_training_rows(table):
    # catches test rows leaking into training, a sample that ignores the classes, and test rows cut as well
    splits = repeated_folds(table, 3, 2, 0.2, 0)
    cut = subsampled_splits(table, splits, 15, seed=0)
    for (train, test), (small, kept) in zip(splits, cut):
        assert len(small) == 15 and set(small) <= set(train) and not set(small) & set(test)
        assert kept.tolist() == test.tolist()
        share = np.mean(table.targets[train] == 1)  # each class about as often as in the fold's training rows
        assert abs(np.sum(table.targets[small] == 1) - 15 * share) <= 1
    assert [s.tolist() for s, _ in cut[:3]] != [s.tolist() for s, _ in cut[3:]]
    with pytest.raises(PoolkitError, match="`sizes` 40 is not below the 40 training rows of fold 0"):
        subsampled_splits(table, splits, 40, seed=0)


def test_pairs_are_subsampled_by_unit():
    frame = pd.DataFrame({"text": [f"q{i}" for i in range(20)], "pair": [f"d{i}" for i in range(20)]})
    pairs = load_pairs(frame, "retrieval")
    splits = pair_folds(pairs, 2, 0.2, 0)
    for (train, test), (small, kept) in zip(splits, subsampled_splits(pairs, splits, 4, seed=1)):
        assert len(small) == 4 and set(small) <= set(train) and kept.tolist() == test.tolist()


def test_the_reading_names_the_winner_at_each_size_and_where_the_lead_changes():
    points = [{"pooler": "mean", "size": 10, "subsampled": True, "fold_metrics": [0.7, 0.72, 0.71]},
              {"pooler": "attention", "size": 10, "subsampled": True, "fold_metrics": [0.6, 0.61, 0.62]},
              {"pooler": "mean", "size": 40, "subsampled": False, "fold_metrics": [0.75, 0.76, 0.74]},
              {"pooler": "attention", "size": 40, "subsampled": False, "fold_metrics": [0.80, 0.83, 0.81]}]
    curve = LearningCurve(points, "accuracy", True, {10: 2.0, 40: 0.5})
    text = curve.reading()
    assert text.startswith("Best accuracy by training rows per fold, 10: mean 0.7100")
    assert "40: attention 0.8133" in text and "The lead changes from mean to attention between 10 and 40" in text
    assert list(curve.frame.columns) == ["pooler", "size", "subsampled", "mean", "std", "fold_0", "fold_1", "fold_2"]
    assert LearningCurve.from_dict(json.loads(json.dumps(curve.to_dict()))) == curve


def test_compare_sizes_trains_every_pooler_at_every_size_on_the_same_test_rows(tmp_path):
    bert = tiny_bert_dir(tmp_path / "bert")
    texts = [f"the {a} {b} {c}" for a in ("big", "small", "red", "blue") for b in ("cat", "dog", "mat")
             for c in ("ran", "sat")] * 2
    pd.DataFrame({"text": texts, "label": ["good", "bad"] * 24}).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(PoolkitError, match="`sizes` 40 is not below the 24 training rows"):
        api.compare(tmp_path / "t.csv", poolers="mean", model=bert, folds=2, sizes="8,40", epochs=1,
                    cache_dir=tmp_path / "cache", out=tmp_path / "out", progress=False)
    assert not (tmp_path / "cache").exists()  # refused before encoding
    board = api.compare(tmp_path / "t.csv", poolers="mean,max", model=bert, folds=2, sizes="8, 16", epochs=1,
                        cache_dir=tmp_path / "cache", out=tmp_path / "out", progress=False)
    curve = pd.read_csv(tmp_path / "out" / "learning_curve.csv")
    assert sorted(zip(curve["pooler"], curve["size"])) == sorted(
        (p, s) for p in ("mean", "max", "mean+logistic") for s in (8, 16, 24))
    full = curve[curve["size"] == 24].set_index("pooler")
    for row in board.rows:  # the last point is the board itself
        assert full.loc[row["pooler"], "mean"] == pytest.approx(row["mean"])
    assert (tmp_path / "out" / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((tmp_path / "out" / "leaderboard.json").read_text())
    assert {"learning_curve.csv", "learning_curve.png"} <= set(saved["files"])
    assert "Best accuracy by training rows per fold, 8:" in (tmp_path / "out" / "report.html").read_text()
