"""The Python API behind the CLI (poolkit.training.api) and its Leaderboard."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from poolkit import PoolkitError
from poolkit.data.tables import fold_splits, split_rows
from poolkit.io import locked_dir
from poolkit.models import PooledModel
from poolkit.pooling import build_pooler
from poolkit.training import api
from poolkit.training.leaderboard import COLUMNS, Leaderboard, leaderboard_row
from poolkit.training.probing import spec_label
from tiny_models import tiny_bert_dir

LONG = "weighted_layer(layer_start=4, weighting=softmax, token_pooler=attention_head)"
SETTINGS = {"data": "toy.csv", "rows": 40, "task": "regression", "folds": 2, "metric": "rmse",
            "higher_is_better": False, "model_label": "tiny"}


def row(label: str, mode: str, values: list[float], params: int = 1234) -> dict:
    return leaderboard_row(label, {"name": label.split("(")[0]}, mode, "rmse",
                           [{"rmse": v, "mae": v / 2} for v in values], params, 12.3)


@pytest.fixture
def board() -> Leaderboard:
    return Leaderboard([row("mean", "frozen", [0.5, 0.7]), row("attention", "finetuned", [0.3, 0.3], 22_700_000),
                        row(LONG, "frozen", [0.2, 0.4]), row("max", "finetuned", [0.2, 0.2])], SETTINGS)


def test_leaderboard_ranks_each_mode_by_the_metric_direction(board):
    frame = board.frame
    assert list(frame.columns[:len(COLUMNS)]) == COLUMNS
    assert list(zip(frame["rank"], frame["pooler"], frame["mode"])) == [
        (1, LONG, "frozen"), (2, "mean", "frozen"), (1, "max", "finetuned"), (2, "attention", "finetuned")]
    assert frame.loc[1, "std"] == pytest.approx(0.1414, abs=1e-4) and frame.loc[1, "mae_mean"] == pytest.approx(0.3)
    folds = board.folds  # per-fold detail: one line per (pooler, mode, fold)
    assert len(folds) == 8 and folds.loc[(folds["pooler"] == "mean") & (folds["fold"] == 1), "rmse"].item() == 0.7


def test_a_diverged_pooler_ranks_last_in_either_direction():
    for higher in (False, True):
        rows = [row("mean", "frozen", [0.5, 0.7]), row("gem", "frozen", [float("nan"), 0.1]),
                row("max", "frozen", [0.2, 0.4])]
        frame = Leaderboard(rows, {**SETTINGS, "higher_is_better": higher}).frame
        assert list(frame["pooler"]) == (["mean", "max", "gem"] if higher else ["max", "mean", "gem"])
    # and the board still draws, as does one of diverged rows only (a constant cosine's correlation is NaN)
    assert Leaderboard(rows, SETTINGS).plot().axes[0].get_xlim()[1] == pytest.approx(0.7 + 0.15 * 0.7, abs=0.2)
    Leaderboard([row("gem", "frozen", [float("nan")] * 2)], SETTINGS).plot()


def test_the_plot_starts_at_zero_and_draws_the_baseline_apart():
    # issue 33 item 4: the demo's axis started at 0.14 (gaps magnified) and the baseline bar looked like a pooler's
    higher = {**SETTINGS, "higher_is_better": True}
    board = Leaderboard([row("mean+logistic", "frozen", [0.5, 0.52]), row("attention", "frozen", [0.55, 0.56])],
                        higher)
    ax = board.plot().axes[0]
    assert ax.get_xlim()[0] == 0.0
    bars = {label.get_text(): patch for label, patch in zip(ax.get_yticklabels(), ax.patches)}
    base = next(name for name in bars if name.startswith("mean+logistic"))
    assert "baseline" in base and bars[base].get_hatch() == "//" and bars["attention"].get_hatch() is None
    assert bars[base].get_facecolor() != bars["attention"].get_facecolor()


def test_best_is_the_best_pooler_row_never_the_linear_baseline():
    """rows[0] can be the baseline (a linear model on mean features, not a pooler: the README's example trained mean
    because of it). Catches best() returning the baseline, ignoring the metric's direction or the mode asked for."""
    rows = [row("mean+ridge", "frozen", [0.1, 0.1]), row("attention", "frozen", [0.3, 0.3]),
            row("max", "frozen", [0.15, 0.25]), row("attention", "finetuned", [0.15, 0.15])]
    board = Leaderboard(rows, SETTINGS)  # rmse: lower is better
    assert board.rows[0]["pooler"] == "mean+ridge"
    assert (board.best()["pooler"], board.best()["mode"]) == ("attention", "finetuned")
    assert (board.best("frozen")["pooler"], board.best("frozen")["mean"]) == ("max", pytest.approx(0.2))
    higher = Leaderboard(rows, {**SETTINGS, "higher_is_better": True})
    assert higher.best()["pooler"] == "attention" and higher.best()["mode"] == "frozen"
    with pytest.raises(PoolkitError, match="no finetuned pooler row besides the baseline"):
        Leaderboard(rows[:3], SETTINGS).best("finetuned")
    with pytest.raises(PoolkitError, match="`mode` must be"):
        board.best("tuned")


def test_leaderboard_text_fits_80_columns_without_cutting_names(board):
    text = str(board)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    assert "0.3000 ± 0.1414" in text and "22.7M" in text and "fine-tuned (the encoder trained too" in text
    assert "lower is better" in text
    # the long name is wrapped inside its column, every piece kept
    start = next(i for i, line in enumerate(lines) if "weighted_layer" in line)
    column = lines[start].index("weighted_layer")
    pieces = [lines[start][column:].split("  ")[0]]
    for line in lines[start + 1:]:
        if line[:column].strip():
            break
        pieces.append(line[column:].strip())
    assert " ".join(pieces) == LONG
    assert "mode" not in str(Leaderboard([row("mean", "frozen", [0.5])], SETTINGS))  # no mode column when all frozen


def test_leaderboard_files_keep_every_row_spec(board, tmp_path):
    board.save(tmp_path)
    csv = pd.read_csv(tmp_path / "leaderboard.csv")
    assert list(csv["pooler"]) == list(board.frame["pooler"])
    assert [json.loads(c) for c in csv["config"]] == [r["config"] for r in board.rows]
    saved = json.loads((tmp_path / "leaderboard.json").read_text())
    assert saved["settings"] == SETTINGS and saved["rows"] == json.loads(json.dumps(board.rows))
    assert (tmp_path / "leaderboard.png").read_bytes()[:4] == b"\x89PNG"
    assert board.plot().axes[0].get_xlabel().startswith("rmse")



def test_leaderboard_json_is_written_last_and_names_the_files_it_belongs_with(board, tmp_path, monkeypatch):
    board.save(tmp_path)
    files = json.loads((tmp_path / "leaderboard.json").read_text())["files"]
    assert files == {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
                     for name in ("leaderboard.csv", "leaderboard.png", "report.html")}

    def crash(self, path=None):
        raise OSError("disk full")

    monkeypatch.setattr(Leaderboard, "plot", crash)  # a crash between the files: no JSON claims a complete set
    with pytest.raises(OSError):
        board.save(tmp_path)
    assert not (tmp_path / "leaderboard.json").exists()


def test_compare_refuses_an_out_folder_another_run_is_writing(tmp_path):
    bert = tiny_bert_dir(tmp_path / "bert")
    rows = [{"text": f"the {('good', 'bad')[i % 2]} dog", "label": ("good", "bad")[i % 2]} for i in range(12)]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    out = tmp_path / "out"
    out.mkdir()
    with locked_dir(out), pytest.raises(PoolkitError, match="another poolkit run is writing to .*out"):
        api.compare(tmp_path / "t.csv", poolers="mean", model=bert, folds=2, epochs=1, cache_dir=tmp_path / "cache",
                    out=out, progress=False)
    assert not (tmp_path / "cache").exists() and list(out.iterdir()) == []  # refused before encoding or writing


@pytest.fixture(scope="module")
def glosses(tmp_path_factory):
    """24 distinct texts of the tiny BERT's words, two classes, and the tiny BERT."""
    import itertools

    folder = tmp_path_factory.mktemp("glosses")
    texts = [" ".join(("the", *words)) for words in itertools.product(("big", "small", "red", "blue"),
                                                                      ("cat", "dog", "mat"), ("ran", "sat"))]
    pd.DataFrame({"text": texts, "label": ["good", "bad"] * 12}).to_csv(folder / "t.csv", index=False)
    return folder / "t.csv", tiny_bert_dir(folder / "bert")


def test_compare_report_explains_fold_0s_held_out_rows_with_the_best_learned_poolers_fold_0_model(glosses, tmp_path):
    # catches explaining rows the model was trained on, mean (no learned weights) taken as the best learned pooler,
    # and a second encoder pass although the cache holds the token states
    data, bert = glosses
    board = api.compare(data, poolers="mean,attention", model=bert, folds=2, epochs=1, cache_dir=tmp_path / "cache",
                        out=tmp_path / "out", progress=False, baseline=False)
    table = api.load(data)
    _, held_out = fold_splits(table, 2, 0.2, 0)[0]
    explained = board.explanation
    assert explained.pooler["name"] == "attention" and explained.source.startswith("attention's fold-0 model")
    assert "read from the feature cache" in explained.source
    assert {item.text for item in explained.items} <= {table.texts[i] for i in held_out}
    assert sorted(item.target for item in explained.items) == ["bad"] * 3 + ["good"] * 3
    for item in explained.items:
        assert item.weights.sum() == pytest.approx(1.0, abs=1e-5) and item.prediction in ("good", "bad")
        assert item.error == pytest.approx(1 - item.scores[item.target])
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count('id="explain-data"') == 1 and "fold 0&#x27;s held-out texts" in page


def test_compare_with_repeats_keeps_every_fold_tests_each_row_and_times_it(glosses, tmp_path):
    # catches repeats that reuse one fold assignment, rows holding only the first repeat's folds, p-values that are
    # not the corrected test of the recorded fold metrics (Holm over the board), and rows without a measured cost
    from scipy import stats

    from poolkit.data.tables import repeated_folds
    from poolkit.training.significance import holm

    data, bert = glosses
    board = api.compare(data, poolers="mean,max,attention", model=bert, folds=2, repeats=2, epochs=1,
                        cache_dir=tmp_path / "cache", out=tmp_path / "out", progress=False)
    splits = repeated_folds(api.load(data), 2, 2, 0.2, 0)
    ratio = np.mean([len(test) / len(train) for train, test in splits])
    assert board.settings["repeats"] == 2 and board.settings["test_over_train"] == pytest.approx(ratio)
    assert board.settings["encode_ms_per_1k"] > 0 and board.settings["encode_device"] == "cpu"
    assert all(len(r["fold_metrics"]) == 4 for r in board.rows) and "2-fold x 2 repeats" in board.title
    best = np.array([m["accuracy"] for m in board.rows[0]["fold_metrics"]])
    raw = []
    for r in board.rows[1:]:
        d = np.array([m["accuracy"] for m in r["fold_metrics"]]) - best
        var = d.var(ddof=1)
        raw.append(1.0 if var == 0 and d.mean() == 0 else 0.0 if var == 0 else
                   2 * stats.t.sf(abs(d.mean()) / np.sqrt((1 / 4 + ratio) * var), 3))
    assert [r["p_vs_best"] for r in board.rows[1:]] == pytest.approx(holm(raw))
    assert [r["tied_with_best"] for r in board.rows[1:]] == [p >= 0.05 for p in holm(raw)]
    for r in board.rows:  # the baseline (mean + logistic regression) too
        assert r["infer_ms_per_1k"] > 0 and r["dim"] == 32 and r["pareto"] in (True, False)
    assert any(r["pareto"] for r in board.rows)
    csv = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert {"p_vs_best", "tied_with_best", "infer_ms_per_1k", "pareto", "dim"} <= set(csv.columns)
    assert "Holm-adjusted" in str(board) and "ms/1k" in str(board)
    assert "Holm-adjusted" in (tmp_path / "out" / "report.html").read_text()


def test_compare_encodes_the_explained_texts_again_when_the_cache_keeps_no_token_states(glosses, tmp_path):
    # weighted_layer over mean is served by per-layer summaries: the explained texts are encoded again, and each
    # word (one piece each here) gets mean's uniform weight (catches states of other rows, or summaries read as tokens)
    data, bert = glosses
    spec = {"name": "weighted_layer", "token_pooler": "mean"}
    board = api.compare(data, poolers=["cls", spec], model=bert, folds=2, epochs=1, cache_dir=tmp_path / "cache",
                        progress=False, baseline=False)
    explained = board.explanation
    assert explained.pooler["name"] == "weighted_layer" and "encoded again" in explained.source
    for item in explained.items:
        np.testing.assert_allclose(item.weights, 1 / len(item.words), rtol=1e-5)
        assert item.layer_weights.sum() == pytest.approx(1.0, abs=1e-5)


def test_spec_label_shows_only_options_that_differ_from_defaults():
    assert spec_label(build_pooler("weighted_layer", 32, 2).get_config()) == "weighted_layer+cls"  # tokens by cls
    spec = {"name": "weighted_layer", "weighting": "softmax", "token_pooler": {"name": "attention", "attn_size": 8}}
    label = spec_label(build_pooler(spec, 32, 2).get_config())
    assert label == "weighted_layer(weighting=softmax)+attention(attn_size=8)"
    assert spec_label(build_pooler({"name": "attention", "attn_size": 8}, 32).get_config()) == "attention(attn_size=8)"


def test_resolve_poolers():
    assert api.resolve_poolers("mean, Attention") == [{"name": "mean"}, {"name": "attention"}]
    assert len(api.resolve_poolers("default")) == len(api.DEFAULT_POOLERS)
    assert api.resolve_poolers(["default", "avg", "max"]) == api.resolve_poolers("default")  # each pooler once
    assert api.resolve_poolers(["max", {"name": "attention", "attn_size": 8}])[1] == {"name": "attention",
                                                                                     "attn_size": 8}
    with pytest.raises(PoolkitError, match="no poolers given"):
        api.resolve_poolers(" , ")


def test_train_checks_settings_and_pooler_before_reading_data(tmp_path):
    missing = tmp_path / "no-such.csv"
    with pytest.raises(PoolkitError, match="unknown training setting 'epoch'. Did you mean 'epochs'"):
        api.train(missing, tmp_path / "out", epoch=3)
    with pytest.raises(PoolkitError, match="has no option 'atn_size'"):
        api.train(missing, tmp_path / "out", pooler={"name": "attention", "atn_size": 8})
    with pytest.raises(PoolkitError, match="`precision` must be one of"):
        api.train(missing, tmp_path / "out", precision="fp8")
    with pytest.raises(PoolkitError, match="`encoder_lr` must be a finite number > 0, got nan"):
        api.train(missing, tmp_path / "out", encoder_lr=float("nan"))
    with pytest.raises(PoolkitError, match="`pooler_lr` must be a finite number > 0, got inf"):
        api.compare(missing, poolers="mean", pooler_lr=float("inf"), out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_compare_returns_a_leaderboard_and_finetunes_the_top_spec(tmp_path):
    bert = tiny_bert_dir(tmp_path / "bert")
    rows = [{"text": f"the {('good', 'bad')[i % 2]} dog {'ran' if i % 3 else 'sat'}", "label": ("good", "bad")[i % 2]}
            for i in range(24)]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    board = api.compare(tmp_path / "t.csv", poolers=["mean", {"name": "attention", "attn_size": 8}], model=bert,
                        folds=2, epochs=1, finetune_top=1, finetune_epochs=1, cache_dir=tmp_path / "cache",
                        out=tmp_path / "out", progress=False, baseline=False)
    assert isinstance(board, Leaderboard) and [r["mode"] for r in board.rows] == ["frozen", "frozen", "finetuned"]
    top = board.rows[0]
    tuned = board.rows[2]
    assert (tuned["pooler"], tuned["config"]) == (top["pooler"], top["config"])  # the same spec, fine-tuned
    assert {r["pooler"] for r in board.rows} == {"mean", "attention(attn_size=8)"}
    folder = tmp_path / "out" / "finetuned" / top["pooler"]
    run = json.loads((folder / "metrics.json").read_text())
    assert run["config"]["pooler"] == top["config"]
    # params counts what each mode trains: the whole fine-tuned model; the frozen row's pooler + head
    model = PooledModel.from_pretrained(folder / "fold_0")
    real = sum(p.numel() for p in model.parameters())
    assert tuned["params"] == run["trainable_params"] == run["total_params"] == real
    assert top["params"] == sum(p.numel() for n, p in model.named_parameters() if not n.startswith("encoder."))
    saved = json.loads((tmp_path / "out" / "leaderboard.json").read_text())["rows"][2]
    assert saved["mode"] == "finetuned" and saved["fold_detail"] == tuned["fold_detail"]
    table = api.load(tmp_path / "t.csv")
    for k, ((train, test), detail) in enumerate(zip(fold_splits(table, 2, 0.2, 0), tuned["fold_detail"])):
        assert set(detail) == set(top["fold_detail"][k]) == {"best_epoch", "epochs_run", "val_accuracy",
                                                              "test_accuracy"}
        assert (detail["best_epoch"], detail["epochs_run"]) == (1, 1)
        assert detail["test_accuracy"] == tuned["fold_metrics"][k]["accuracy"]
        assert detail["val_accuracy"] == run["folds"][k]["history"][0]["accuracy"]
        rows = np.load(folder / f"fold_{k}" / "test_outputs.npz")  # the probes' outer and inner splits
        inner = split_rows(table.subset(train), 0.2, k)
        assert rows["test_rows"].tolist() == test.tolist() and rows["val_rows"].tolist() == train[inner[1]].tolist()


def test_a_one_fold_board_has_no_std_rather_than_a_zero_one(tmp_path):
    board = Leaderboard([row("mean", "frozen", [0.5]), row("max", "frozen", [0.4])], {**SETTINGS, "folds": 1})
    assert board.rows[0]["std"] is None  # 0.0 would claim a perfectly stable score from a single fold
    rows = [line for line in str(board).splitlines() if line.startswith(("1 ", "2 "))]
    assert len(rows) == 2 and "0.4000 (one fold)" in rows[0] and not any("±" in line for line in rows)
    board.save(tmp_path)  # the plot draws no error bar, the files say null / empty
    assert json.loads((tmp_path / "leaderboard.json").read_text())["rows"][0]["std"] is None
    assert pd.read_csv(tmp_path / "leaderboard.csv")["std"].isna().all()


def test_compare_reports_each_step_through_its_callback_and_prints_nothing(glosses, tmp_path, capsys):
    # the library never prints: catches a print left in a step, a step that does not report (the poolers' lines, the
    # baseline's), and settings that are not CompareConfig's refused late or silently dropped
    data, bert = glosses
    lines = []
    board = api.compare(data, poolers="mean,max", model=bert, folds=2, epochs=1, cache_dir=tmp_path / "cache",
                        progress=False, report=lines.append)
    assert capsys.readouterr().out == ""
    assert lines[0] == "task: classification, inferred from 'label' (2 classes); pass `task` to choose"
    assert lines[1].startswith("poolkit compare: 2 poolers on") and "ranked by accuracy" in lines[1]
    assert sorted(line.split()[0] for line in lines[2:]) == sorted(board.frame["pooler"])  # one line per row
    with pytest.raises(PoolkitError, match="unknown compare setting 'epoch'.*Did you mean 'epochs'"):
        api.compare(data, poolers="mean", epoch=3)
    assert api.compare_config(folds=4).for_data(quick=True) == api.compare_config(folds=4, epochs=8)


@pytest.mark.parametrize("bad", [-3, 1.5, True])
def test_a_finetune_top_that_would_mean_no_fine_tuning_is_refused(bad):
    # -3 ran with no fine-tuning and exit 0 (issue 32, item 12)
    with pytest.raises(PoolkitError, match="`finetune_top` must be an int >= 0"):
        api.compare_config(finetune_top=bad)


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_a_max_length_that_is_not_a_positive_integer_is_refused(model_dir, bad):
    # 0 silently meant 256 (issue 32, item 12)
    import poolkit

    with pytest.raises(PoolkitError, match="`max_length` must be a positive number of tokens"):
        poolkit.encode(["a text"], model=model_dir, max_length=bad)
