"""load_table: formats, task inference, targets, and one-line errors for every bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from poolkit.data import decode_labels, load_table, stratified_sample, train_val_split
from poolkit.errors import PoolkitError

TEXTS = [f"text number {i}" for i in range(12)]
LABELS = ["cat", "dog", "bird"] * 4


def write(tmp_path, name: str, content: str | bytes):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def csv(tmp_path, frame: dict, name: str = "data.csv"):
    path = tmp_path / name
    pd.DataFrame(frame).to_csv(path, index=False)
    return path


def error(path, *fragments, **kwargs) -> str:
    """load_table raises a one-line PoolkitError containing every fragment."""
    with pytest.raises(PoolkitError) as info:
        load_table(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


# -- formats ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".json", ".parquet", ".csv.gz"])
def test_every_format_reads_the_same_table(tmp_path, suffix):
    frame = pd.DataFrame({"text": TEXTS, "label": LABELS})
    path = tmp_path / f"data{suffix}"
    if suffix == ".tsv":
        frame.to_csv(path, sep="\t", index=False)
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    elif suffix == ".json":
        frame.to_json(path, orient="records")
    elif suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    data = load_table(path)
    assert data.texts == TEXTS
    assert data.task == "classification"
    assert data.label_names == ["bird", "cat", "dog"]
    assert data.targets.dtype == np.int64 and data.targets.shape == (12,)
    assert [data.label_names[i] for i in data.targets] == LABELS
    assert data.source == str(path) and data.text_col == "text" and data.target_cols == ("label",)


def test_json_lines_with_json_extension(tmp_path):
    lines = "\n".join(json.dumps({"text": t, "label": lab}) for t, lab in zip(TEXTS, LABELS))
    data = load_table(write(tmp_path, "data.json", lines))
    assert data.texts == TEXTS and len(data.label_names) == 3


def test_labels_like_na_stay_labels(tmp_path):
    data = load_table(csv(tmp_path, {"text": TEXTS, "label": ["NA", "EU"] * 6}))
    assert data.label_names == ["EU", "NA"]


# -- task inference and targets ----------------------------------------------------------------------


def test_few_integer_values_are_classes_sorted_numerically(tmp_path):
    data = load_table(csv(tmp_path, {"text": TEXTS, "label": [10, 2, 1] * 4}))
    assert data.task == "classification"
    assert data.label_names == ["1", "2", "10"]
    assert data.targets[:3].tolist() == [2, 1, 0]


def test_floats_are_regression(tmp_path):
    y = np.linspace(0, 1, 12)
    data = load_table(csv(tmp_path, {"text": TEXTS, "label": y}))
    assert data.task == "regression" and data.label_names is None
    assert data.targets.dtype == np.float32 and data.targets.shape == (12, 1)
    np.testing.assert_allclose(data.targets[:, 0], y, rtol=1e-6)
    assert data.n_outputs == 1


def test_many_distinct_integers_are_regression(tmp_path):
    data = load_table(csv(tmp_path, {"text": TEXTS, "label": list(range(12))}))
    assert data.task == "regression"


def test_several_targets_are_multi_target_regression(tmp_path):
    frame = {"text": TEXTS, "a": np.arange(12.0), "b": np.arange(12.0) * 2}
    data = load_table(csv(tmp_path, frame), target_cols=["a", "b"])
    assert data.task == "regression" and data.targets.shape == (12, 2) and data.n_outputs == 2
    assert data.targets[5].tolist() == [5.0, 10.0]


def test_explicit_task_overrides_inference(tmp_path):
    data = load_table(csv(tmp_path, {"text": TEXTS, "label": [0, 1] * 6}), task="regression")
    assert data.task == "regression" and data.targets[:2, 0].tolist() == [0.0, 1.0]


def test_multilabel_from_01_columns(tmp_path):
    frame = {"text": TEXTS, "x": [1, 0] * 6, "y": [1, 1, 0] * 4}
    data = load_table(csv(tmp_path, frame), target_cols=("x", "y"), task="multilabel")
    assert data.label_names == ["x", "y"] and data.targets.dtype == np.float32
    assert data.targets[:3].tolist() == [[1, 1], [0, 1], [1, 0]]


@pytest.mark.parametrize("sep", ["|", ","])
def test_multilabel_from_one_separated_column(tmp_path, sep):
    tags = [f"red{sep} blue", "blue", "", "green"] * 3
    data = load_table(csv(tmp_path, {"text": TEXTS, "tags": tags}), target_cols="tags", task="multilabel")
    assert data.label_names == ["blue", "green", "red"]
    assert data.targets[:4].tolist() == [[1, 0, 1], [1, 0, 0], [0, 0, 0], [0, 1, 0]]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_multilabel_from_a_column_of_lists(tmp_path, suffix):
    frame = pd.DataFrame({"text": TEXTS[:4], "tags": [["red", "blue"], ["blue"], [], ["green"]]})
    path = tmp_path / f"data{suffix}"
    if suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_json(path, orient="records", lines=True)
    data = load_table(path, target_cols="tags", task="multilabel")
    assert data.label_names == ["blue", "green", "red"]
    assert data.targets.tolist() == [[1, 0, 1], [1, 0, 0], [0, 0, 0], [0, 1, 0]]


def test_given_label_names_fix_the_class_order(tmp_path):
    data = load_table(csv(tmp_path, {"text": TEXTS, "label": ["b"] * 12}), label_names=["a", "b", "c"])
    assert data.targets.tolist() == [1] * 12 and data.n_outputs == 3


def test_decode_labels():
    names = ["bird", "cat", "dog"]
    assert decode_labels(np.array([2, 0]), names) == ["dog", "bird"]
    assert decode_labels(np.array([[0.1, 0.7, 0.2]]), names) == ["cat"]
    assert decode_labels(np.array([[0.9, 0.2, 0.6]]), names, multilabel=True) == [["bird", "dog"]]


# -- sampling and splitting -----------------------------------------------------------------------


def classes(n_per_class: list[int], tmp_path):
    labels = [f"c{k}" for k, n in enumerate(n_per_class) for _ in range(n)]
    return load_table(csv(tmp_path, {"text": [f"t{i}" for i in range(len(labels))], "label": labels}))


def test_stratified_sample_is_deterministic_and_keeps_rare_classes(tmp_path):
    data = classes([500, 100, 3], tmp_path)
    sample = stratified_sample(data, 60, seed=1)
    assert len(sample) == 60
    counts = np.bincount(sample.targets, minlength=3)
    assert counts[2] == 3 and counts[0] > counts[1] > counts[2]  # floor keeps the rare class, rest proportional
    assert sample.texts == stratified_sample(data, 60, seed=1).texts
    assert sample.texts != stratified_sample(data, 60, seed=2).texts
    assert stratified_sample(data, 10_000) is data


def test_train_val_split_is_stratified_and_disjoint(tmp_path):
    data = classes([50, 20, 1], tmp_path)
    train, val = train_val_split(data, 0.2, seed=0)
    assert sorted(train.texts + val.texts) == sorted(data.texts)
    assert np.bincount(val.targets, minlength=3).tolist() == [10, 4, 0]  # the single row of c2 stays in train
    assert train.label_names == val.label_names == data.label_names


# -- bad input: one line naming the problem and the fix ------------------------------------------


def test_missing_file(tmp_path):
    error(tmp_path / "nope.csv", "nope.csv", "does not exist")


def test_unsupported_extension(tmp_path):
    error(write(tmp_path, "data.xlsx", "x"), "unsupported file type '.xlsx'", ".csv")


def test_empty_file(tmp_path):
    error(write(tmp_path, "data.csv", ""), "data.csv is empty")


@pytest.mark.parametrize("name,content", [("data.csv", "text,label\n"), ("data.jsonl", "\n")])
def test_no_rows(tmp_path, name, content):
    error(write(tmp_path, name, content), "no data rows")


def test_misspelled_text_column(tmp_path):
    path = csv(tmp_path, {"txt": TEXTS, "label": LABELS})
    error(path, "column 'text' not found", "columns: txt, label", "`text_col`", "Did you mean 'txt'?")


def test_misspelled_target_column(tmp_path):
    path = csv(tmp_path, {"text": TEXTS, "labels": LABELS})
    error(path, "column 'label' not found", "`target_col`", "Did you mean 'labels'?")


def test_wrong_delimiter_hint(tmp_path):
    error(write(tmp_path, "data.csv", "text;label\na;b\n"), "column 'text' not found", "delimiter")


def test_text_column_is_not_a_target(tmp_path):
    error(csv(tmp_path, {"text": TEXTS}), "both the text and a target", target_cols="text")


def test_numeric_text_column(tmp_path):
    error(csv(tmp_path, {"text": range(12), "label": LABELS}), "holds numbers", "`text_col`")


def test_empty_texts_are_counted_with_rows(tmp_path):
    texts = TEXTS[:2] + ["", "   "] + TEXTS[4:]
    error(csv(tmp_path, {"text": texts, "label": LABELS}), "empty or whitespace-only in 2 rows (3, 4;")


def test_nan_regression_targets_name_rows(tmp_path):
    y = [0.5, 1.5, None, 2.5] * 3
    path = csv(tmp_path, {"text": TEXTS, "y": y})
    error(path, "'y' is missing or not a finite number in 3 rows (3, 7, 11;", target_cols="y", task="regression")


def test_non_numeric_regression_targets(tmp_path):
    y = ["1.5", "2.5", "3.0kg"] + [str(i + 0.5) for i in range(9)]
    path = csv(tmp_path, {"text": TEXTS, "y": y})
    error(path, "not a finite number in 1 row (3;", target_cols="y", task="regression")


def test_mostly_numeric_labels_are_flagged_before_becoming_classes(tmp_path):
    y = [str(i + 0.5) for i in range(11)] + ["n/a"]
    path = csv(tmp_path, {"text": TEXTS, "y": y})
    error(path, "numeric except 1 row (12;", "'n/a'", "`task` classification", target_cols="y")


def test_single_class(tmp_path):
    error(csv(tmp_path, {"text": TEXTS, "label": ["spam"] * 12}), "single class ('spam')", "at least two")


def test_missing_class_labels(tmp_path):
    error(csv(tmp_path, {"text": TEXTS, "label": LABELS[:-1] + [None]}), "label column 'label' is empty in 1 row (12;")


def test_unknown_labels_against_given_names(tmp_path):
    error(csv(tmp_path, {"text": TEXTS, "label": LABELS}), "not in the known set ('bird'", label_names=["cat", "dog"])


def test_classification_with_several_columns(tmp_path):
    path = csv(tmp_path, {"text": TEXTS, "a": LABELS, "b": LABELS})
    error(path, "one target column, got 2 (a, b)", target_cols=("a", "b"), task="classification")


def test_multilabel_columns_must_be_01(tmp_path):
    path = csv(tmp_path, {"text": TEXTS, "a": [0, 1] * 6, "b": [0, 2] * 6})
    error(path, "multilabel column 'b' is not 0/1 in 6 rows", target_cols=("a", "b"), task="multilabel")


def test_unknown_task(tmp_path):
    path = csv(tmp_path, {"text": TEXTS, "label": LABELS})
    error(path, "unknown task 'clasification'", "Did you mean 'classification'?", task="clasification")


def test_latin1_file_says_resave_as_utf8(tmp_path):
    path = write(tmp_path, "data.csv", "text,label\ncaf\xe9,a\nthe,b\n".encode("latin-1"))
    error(path, "not valid UTF-8 (byte 0xe9)", "re-save it with UTF-8")


def test_malformed_csv(tmp_path):
    path = write(tmp_path, "data.csv", "text,label\na,1\nb,2,3\n")
    error(path, "could not parse data.csv as CSV", "Expected 2 fields in line 3", "quoting")


def test_malformed_jsonl(tmp_path):
    path = write(tmp_path, "data.jsonl", '{"text": "a", "label": 1}\n{"text": "b"\n')
    error(path, "could not parse data.jsonl as JSONL", "one complete JSON object on each line")


def test_corrupt_parquet(tmp_path):
    error(write(tmp_path, "data.parquet", "not parquet"), "could not parse data.parquet as PARQUET")


def test_fold_splits_cover_every_row_once_and_stratify():
    import numpy as np

    from poolkit.data import TableData, fold_splits

    targets = np.array([0] * 30 + [1] * 10)
    data = TableData([f"t{i}" for i in range(40)], targets, "classification", ["a", "b"], ("label",), "text", "x")
    splits = fold_splits(data, 5, seed=1)
    seen = np.concatenate([val for _, val in splits])
    assert sorted(seen.tolist()) == list(range(40))
    for train, val in splits:
        assert not set(train) & set(val) and len(train) + len(val) == 40
        assert (targets[val] == 1).sum() == 2  # 10 of class b spread evenly over 5 folds
    assert [v.tolist() for _, v in fold_splits(data, 5, seed=1)] == [v.tolist() for _, v in splits]
    (train, val), = fold_splits(data, 1, val_fraction=0.25)
    assert len(val) == 10 and len(train) == 30
    with pytest.raises(PoolkitError, match="too few"):
        fold_splits(data, 25)


# -- odd data --------------------------------------------------------------------------------------


def test_a_duplicated_column_name_is_an_error(tmp_path):
    error(write(tmp_path, "dup.csv", "text,label,text\na,x,b\nc,y,d\n"), "'text' appears more than once")


def test_texts_that_are_not_strings_or_only_zero_width_are_errors(tmp_path):
    pd.DataFrame({"text": [{"a": i} for i in range(4)], "label": ["x", "y", "x", "y"]}).to_parquet(
        path := tmp_path / "dicts.parquet")  # a struct column reads back as dicts
    error(path, "non-text values (dict) in 4 rows (1, 2, 3, 4;")
    path = write(tmp_path, "mixed.jsonl", '{"text": 5, "label": "x"}\n{"text": "hi", "label": "y"}\n')
    error(path, "non-text values (int) in 1 row (1;")
    error(csv(tmp_path, {"text": ["\u200b\u200d", "hello", "world"], "label": ["x", "y", "x"]}),
          "whitespace-only in 1 row (1;", "zero-width")


def test_years_are_regression_not_classes(tmp_path):
    years = [1990 + i % 30 for i in range(300)]  # 30 distinct integers: quantities, not class codes
    data = load_table(csv(tmp_path, {"text": [f"t{i}" for i in range(300)], "label": years}))
    assert data.task == "regression"


def test_integer_targets_between_codes_and_quantities_ask_for_the_task(tmp_path):
    # issue 33 item 4: WordNet depth (14 whole numbers) read as 14 classes. Catches a middle count taken silently
    # either way, and a few codes (or 21+ values) no longer inferred
    texts = [f"t{i}" for i in range(140)]
    depth = csv(tmp_path, {"text": texts, "label": [i % 14 for i in range(140)]})
    with pytest.raises(PoolkitError, match="14 distinct whole numbers, which could be class codes or a quantity: "
                                           "pass `task` classification or regression"):
        load_table(depth)
    assert load_table(depth, task="regression").task == "regression"
    assert load_table(csv(tmp_path, {"text": texts, "label": [i % 10 for i in range(140)]})).task == "classification"
    assert load_table(csv(tmp_path, {"text": texts, "label": [i % 21 for i in range(140)]})).task == "regression"


def test_parquet_windows_do_not_hold_a_whole_row_group(tmp_path):
    # catches an unbuffered reader: it holds the row group's whole compressed column (pyarrow writes up to 1M rows
    # per group), so memory grew with the file; buffered, one window's rows and a 4 MiB buffer
    import pyarrow as pa
    import pyarrow.parquet as pq

    from poolkit.data.tables import read_frame_windows

    rng = np.random.default_rng(0)
    texts = [rng.bytes(48).hex() for _ in range(150_000)]  # incompressible: a 14 MB column in one row group
    pq.write_table(pa.table({"text": texts}), tmp_path / "big.parquet", compression="none")
    column = pq.ParquetFile(tmp_path / "big.parquet").metadata.row_group(0).column(0).total_compressed_size
    windows = read_frame_windows(tmp_path / "big.parquet", 1000)
    first = next(windows)
    held = pa.total_allocated_bytes()
    assert first["text"].tolist() == texts[:1000]
    assert held < column / 2, (held, column)
