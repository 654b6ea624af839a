"""The `poolkit` command end to end on tiny data and a tiny random-init BERT, and every bad input."""

from __future__ import annotations

import contextlib
import json
import shutil

import pandas as pd
import pytest

from poolkit import PoolkitError

from poolkit_bench.commands import BENCHMARKS, parser_for
from poolkit.cli.options import config_from_args
from poolkit_bench.snr_config import PRESETS as SNR_PRESETS
from poolkit.cli import main
from poolkit.cli.common import parse_options, pooler_specs
from tiny_models import tiny_bert_dir

WORDS = ["good", "bad"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return tiny_bert_dir(tmp_path_factory.mktemp("bert"), hidden=32)


@pytest.fixture
def table(tmp_path):
    rows = [{"text": f"the {WORDS[i % 2]} dog {'ran fast' if i % 3 else 'sat'}", "label": WORDS[i % 2],
             "score": float(i % 2) + 0.1 * (i % 5)} for i in range(40)]
    path = tmp_path / "train.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cached(cache):
    """The feature cache's entries (not its lock files)."""
    return [p for p in cache.iterdir() if p.suffix != ".lock"]


def test_compare_end_to_end_and_refuses_to_overwrite(capsys, tmp_path, table, bert):
    out, cache = tmp_path / "cmp", tmp_path / "cache"
    args = ["compare", "--data", table, "--model", bert, "--poolers", "mean,attention", "weighted_layer",
            "--pooling-opt", "attn_size=8", "--folds", 2, "--epochs", 2, "--out", out, "--cache-dir", cache]
    code, stdout, _ = run(capsys, *args)
    assert code == 0, stdout
    board = pd.read_csv(out / "leaderboard.csv")
    assert list(board.columns[:13]) == ["rank", "pooler", "mode", "metric", "mean", "std", "p_vs_best",
                                        "tied_with_best", "infer_ms_per_1k", "pareto", "dim", "params", "seconds"]
    assert sorted(board["pooler"]) == ["attention(attn_size=8)", "mean", "mean+logistic", "weighted_layer+cls"]
    assert (board["metric"] == "accuracy").all() and board["mean"].between(0, 1).all()
    assert board["mean"].is_monotonic_decreasing
    saved = json.loads((out / "leaderboard.json").read_text())
    assert saved["settings"]["folds"] == 2 and len(saved["rows"]) == 4
    specs = {row["pooler"]: row["config"] for row in saved["rows"]}  # each row's full spec, options included
    assert specs["attention(attn_size=8)"]["attn_size"] == 8 and specs["weighted_layer+cls"]["num_layers"] == 2
    assert [json.loads(c) for c in board["config"]] == [row["config"] for row in saved["rows"]]
    assert all(len(row["fold_metrics"]) == 2 for row in saved["rows"])
    assert all(len(line) <= 80 for line in stdout.splitlines() if "±" in line), stdout  # rows fit 80 columns
    assert (out / "leaderboard.png").stat().st_size > 1000
    assert len(cached(cache)) == 1  # encoded once

    code, _, err = run(capsys, *args)
    assert code == 2 and "--force" in err and err.count("\n") == 1
    code, _, _ = run(capsys, *args, "--force")
    assert code == 0 and len(cached(cache)) == 1  # the cache is reused, not rebuilt


def test_compare_runs_started_in_one_second_get_their_own_default_folders(capsys, tmp_path, table, bert,
                                                                          monkeypatch):
    # catches a default folder named by the second alone: a second compare of a script's back-to-back runs would be
    # refused (its leaderboard "already there") or, forced, overwrite the first's
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt, *_: fmt.replace("%Y%m%d-%H%M%S", "20261204-180000"))
    args = ["compare", "--data", table, "--model", bert, "--poolers", "mean", "--folds", 2, "--epochs", 1,
            "--cache-dir", tmp_path / "cache"]
    for _ in range(3):
        code, stdout, err = run(capsys, *args)
        assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert names == ["compare-20261204-180000", "compare-20261204-180000-2", "compare-20261204-180000-3"]
    assert all((tmp_path / "runs" / name / "leaderboard.csv").exists() for name in names)
    assert "compare-20261204-180000-3" in stdout  # where this run wrote is printed


def test_compare_regression_ranks_by_rmse(capsys, tmp_path, table, bert):
    out = tmp_path / "reg"
    code, stdout, _ = run(capsys, "compare", "--data", table, "--target-col", "score", "--model", bert, "--poolers",
                     "mean,max", "--folds", 2, "--epochs", 2, "--out", out, "--cache-dir", tmp_path / "c")
    assert code == 0
    board = pd.read_csv(out / "leaderboard.csv")
    assert (board["metric"] == "rmse").all() and board["mean"].is_monotonic_increasing
    assert "task: regression, inferred from 'score' (1 numeric target(s)); pass --task to choose" in stdout


def test_compare_similarity_pairs_ranks_by_spearman_and_refuses_what_it_cannot_do(capsys, tmp_path, bert):
    pairs = tmp_path / "pairs.csv"
    words = "cat dog mat big small red blue green one two three slow".split()  # in the tiny model's vocabulary
    pd.DataFrame({"a": [f"the {w} {v}" for w in words for v in ("sat", "ran")],
                  "b": [f"a {v} {w} was" for w in words[::-1] for v in ("fast", "not")],
                  "sim": [float(i % 5) for i in range(24)]}).to_csv(pairs, index=False)
    out = tmp_path / "sim"
    args = ["compare", "--data", pairs, "--task", "similarity", "--text-col", "a", "--pair-col", "b", "--target-col",
            "sim", "--model", bert, "--poolers", "mean,attention", "--pooling-opt", "attn_size=8", "--folds", 2,
            "--epochs", 2, "--cache-dir", tmp_path / "c"]
    code, stdout, err = run(capsys, *args, "--out", out)
    assert code == 0, stdout + err
    board = pd.read_csv(out / "leaderboard.csv")
    assert (board["metric"] == "spearman").all() and board["mean"].is_monotonic_decreasing
    assert sorted(board["pooler"]) == ["attention(attn_size=8)", "mean"] and "pearson" in board.columns
    assert "(24 pairs, similarity, 2 folds" in stdout
    code, _, err = run(capsys, *args, "--out", tmp_path / "other", "--negative-col", "b")
    assert code == 2 and err.count("\n") == 1 and "--negative-col and --corpus are for retrieval" in err


def test_parse_options():
    assert parse_options(["attn_size=256", "weighted_layer:token_pooler=mean", "query_index=[0, 1]", "mlp=false",
                          'token_pooler={"name": "gem", "p": 3}']) == [
        (None, "attn_size", 256), ("weighted_layer", "token_pooler", "mean"), (None, "query_index", [0, 1]),
        (None, "mlp", False), (None, "token_pooler", {"name": "gem", "p": 3})]


def test_pooler_specs_take_commas_or_spaces_and_route_options():
    assert pooler_specs(["mean,max", "attention"], None) == [{"name": "mean"}, {"name": "max"}, {"name": "attention"}]
    # unprefixed: every pooler that has the option (not mean); prefixed: that pooler only
    specs = pooler_specs(["mean attention attention_head"], ["attn_size=16", "attention:init=kaiming"])
    assert specs == [{"name": "mean"}, {"name": "attention", "attn_size": 16, "init": "kaiming"},
                     {"name": "attention_head", "attn_size": 16}]
    with pytest.raises(PoolkitError, match="not one of the poolers given"):
        pooler_specs(["mean"], ["attention:attn_size=16"])
    with pytest.raises(PoolkitError, match="has no option 'atn_size'"):  # no pooler has it: the error says so
        pooler_specs(["mean,attention"], ["atn_size=16"])


def test_pooler_specs_take_one_pooler_several_times_with_options():
    # the scorer ablation's leaderboard: catches NAME:KEY=VALUE read as an unknown name, and specs of one pooler merged
    specs = pooler_specs(["attention,attention:scorer=glu", "attention:scorer=linear:attn_size=8"], None)
    assert specs == [{"name": "attention"}, {"name": "attention", "scorer": "glu"},
                     {"name": "attention", "scorer": "linear", "attn_size": 8}]
    with pytest.raises(PoolkitError, match="has no option 'scorr'"):
        pooler_specs(["attention:scorr=glu"], None)


def test_bench_snr_poolers_take_the_same_syntax():
    args = parser_for("snr").parse_args(["--poolers", "adapool,mean", "max"])
    assert config_from_args(args, SNR_PRESETS).poolers == ("adapool", "mean", "max")


def test_renamed_lr_flag_names_its_replacements(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--data", "x.csv", "--out", "o", "--lr", "1e-3"])
    assert exit_info.value.code == 2 and "--encoder-lr" in capsys.readouterr().err


def test_python_dash_m_runs_the_cli():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "poolkit.cli", "compare", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "--pooler-opt" in result.stdout and "--encoder-lr" in result.stdout


def _help_in_fresh_interpreter(code: str) -> str:
    """What ``code`` prints in a fresh interpreter, run after ``import sys``, poolkit.cli's ``main`` and
    ``show_help(argv)`` (``main([*argv, '--help'])``); ``heavy()`` there: which of torch, transformers, pandas, numpy,
    matplotlib, sklearn and scipy are imported."""
    import subprocess
    import sys

    prelude = ("import sys\nfrom poolkit.cli import main\n"
               "def show_help(argv):\n    try:\n        main([*argv, '--help'])\n    except SystemExit:\n        pass\n"
               "HEAVY = ('torch', 'transformers', 'pandas', 'numpy', 'matplotlib', 'sklearn', 'scipy')\n"
               "def heavy():\n    return sorted(m for m in HEAVY if m in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_the_cli_makes_torchs_openmp_threads_sleep_while_they_wait_unless_the_user_chose():
    """The ``poolkit`` command runs with OMP_WAIT_POLICY=PASSIVE (docs/performance.md: faster beside busy processes).
    OpenMP reads it when torch loads, so it must be set before anything imports torch. Catches the setting made after
    torch is imported (too late to take effect), left out, or made over a policy the user set. (``--help`` imports no
    torch at all: the point is that the setting is made by then.)"""
    import os
    import subprocess
    import sys

    code = ("import os, sys\nfrom poolkit.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for chosen, expected in ((None, "False PASSIVE"), ("ACTIVE", "False ACTIVE")):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env=env if chosen is None else {**env, "OMP_WAIT_POLICY": chosen})
        assert run.stdout.strip().splitlines()[-1] == expected, run.stderr[-2000:]


def test_help_imports_neither_torch_nor_transformers():
    """`poolkit --help`, every command's --help and `bench --help` (the list of benchmarks; each benchmark's own
    --help: the next test) build their parsers from plain data. Catches a command
    module, a config or `import poolkit` that pulls torch, transformers, pandas or the plotting stack back in at
    parse time, and `bench --help` loading every benchmark's module."""
    out = _help_in_fresh_interpreter(
        "for argv in ([], ['train'], ['predict'], ['embed'], ['evaluate'], ['merge'], ['compare'], ['explain'],\n"
        "             ['export-onnx'], ['data', 'list'], ['cache', 'list'], ['zoo'], ['bench']):\n"
        "    show_help(argv)\n"
        "print('IMPORTED', heavy())\n")
    assert out.strip().splitlines()[-1] == "IMPORTED []"
    assert "export-onnx" in out and "--backend" in out  # the help was printed
    assert "channel-spatial" in out  # and the benchmarks listed


def test_bench_help_imports_no_heavy_module():
    """Each `poolkit bench NAME --help` builds its parser from the benchmark's settings alone. Catches a config module
    that imports torch, pandas or the plotting stack (itself or through its runner module), and a command that loads
    its runner module to build its parser."""
    out = _help_in_fresh_interpreter(
        "import contextlib, io\nfrom poolkit_bench.commands import BENCHMARKS\n"
        "for bench in BENCHMARKS:\n"
        "    text = io.StringIO()\n"
        "    with contextlib.redirect_stdout(text):\n"
        "        show_help(['bench', bench.name])\n"
        "    print(bench.name, '--out' in text.getvalue(), heavy())\n")
    # per benchmark, in order: its help was printed, and no heavy module was imported by it or any before it
    assert out.splitlines() == [f"{bench.name} True []" for bench in BENCHMARKS]


def test_data_list(capsys):
    code, out, _ = run(capsys, "data", "list")
    assert code == 0 and "wordnet-supersense" in out and "embedded" in out


def bad_table(tmp_path, name, content, mode="w"):
    path = tmp_path / name
    if mode == "wb":
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize("command", ["compare", "train"])
@pytest.mark.parametrize("case, match", [
    ("missing_file", "not found|does not exist|no such"),
    ("misspelled_column", "Did you mean 'label'"),
    ("empty_file", "empty|no rows"),
    ("empty_texts", "empty"),
    ("nan_regression", "not a finite number|missing"),
    ("single_class", "one class|single class|only one"),
    ("bad_encoding", "UTF-8"),
    ("unknown_model", "unknown model|cannot load"),
    ("unknown_pooler", "unknown pooler"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, table, bert, command, case, match):
    data, extra, model = table, [], bert
    if case == "missing_file":
        data = tmp_path / "nope.csv"
    elif case == "misspelled_column":
        extra = ["--target-col", "labl"]
    elif case == "empty_file":
        data = bad_table(tmp_path, "empty.csv", "")
    elif case == "empty_texts":
        data = bad_table(tmp_path, "blank.csv", "text,label\nhello,a\n  ,b\nworld,b\n")
    elif case == "nan_regression":
        data = bad_table(tmp_path, "nan.csv", "text,y\na,1.0\nb,\nc,2.5\nd,3\n")
        extra = ["--target-col", "y", "--task", "regression"]
    elif case == "single_class":
        data = bad_table(tmp_path, "one.csv", "text,label\na,x\nb,x\nc,x\n")
    elif case == "bad_encoding":
        data = bad_table(tmp_path, "latin.csv", "text,label\ncaf\xe9,a\nna\xefve,b\n".encode("latin-1"), "wb")
    elif case == "unknown_model":
        model = tmp_path / "no-such-model"
    elif case == "unknown_pooler":
        extra = ["--poolers", "atention"] if command == "compare" else ["--pooling", "atention"]
    out = tmp_path / "out"
    argv = [command, "--data", data, "--model", model, "--out", out, *extra]
    if command == "compare":
        argv += ["--cache-dir", tmp_path / "cache", "--folds", 2, "--epochs", 1]
    code, _, err = run(capsys, *argv)
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    import re
    assert re.search(match, err, re.IGNORECASE), err
    assert not any(out.glob("leaderboard*")) and not any(out.glob("fold_*"))


@pytest.mark.parametrize("command", ["compare", "train"])
@pytest.mark.parametrize("case, match", [
    ("max_length", "--max-length 100 is more than the model's 64 positions"),
    ("out_under_a_file", "cannot be created: .* is a file"),
    ("folds_per_class", "class 'rare' has 2 row.s., fewer than --folds 3: use --folds 2 or fewer"),
    ("nan_lr", "--pooler-lr: must be a finite number > 0, got nan"),
    ("option_value", "layer_start must index the 3 hidden states"),
    ("negative_seed", "--seed must be an int(eger)? >= 0, got -1"),  # issue 32, item 15 (numpy's own ValueError)
    ("huge_option", "its weights do not fit in memory with attn_size=1000000000: use smaller sizes"),
])
def test_checked_before_encoding_or_creating_out(capsys, tmp_path, table, bert, command, case, match):
    import re

    out, data, extra = tmp_path / "out", table, []
    if case == "max_length":
        extra = ["--max-length", 100]
    elif case == "out_under_a_file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "out"
    elif case == "folds_per_class":
        frame = pd.read_csv(table)
        frame.loc[:1, "label"] = "rare"
        frame.to_csv(data := tmp_path / "rare.csv", index=False)
        extra = ["--folds", 3]
    elif case == "option_value":  # the tiny encoder has 2 layers: 3 hidden states
        extra = ["--pooler-opt", "layer_start=7"]
    elif case == "negative_seed":
        extra = ["--seed", -1]
    elif case == "huge_option":  # 1.5 TB of weights: the allocator's error before
        extra = ["--pooler-opt", "attn_size=1000000000"]
    else:
        extra = ["--pooler-lr", "nan"]
    argv = [command, "--data", data, "--model", bert, "--out", out, "--epochs", 1, *extra]
    pooler = {"option_value": "weighted_layer", "huge_option": "attention"}.get(case, "mean")
    argv += ["--poolers", pooler, "--cache-dir", tmp_path / "cache"] if command == "compare" else ["--pooler", pooler]
    with pytest.raises(SystemExit) if case == "nan_lr" else contextlib.nullcontext() as exited:
        code, _, err = run(capsys, *argv)
    if exited is not None:  # argparse refuses the value
        code, err = exited.value.code, capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert re.search(match, err), err
    assert not out.exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("data, says", [(".", "is a directory, not a file"), ("/dev/null", "is not a regular file")])
def test_embed_refuses_an_input_that_is_not_a_file_before_loading_the_model(capsys, tmp_path, data, says):
    # issue 32, item 15: IsADirectoryError, and "/dev/null does not exist"; the model is never loaded (no --model
    # needed: the check comes first)
    code, _, err = run(capsys, "embed", "--data", data, "--out", tmp_path / "v.npy", "--model", tmp_path / "none")
    assert code == 2 and err.count("\n") == 1 and says in err, err


@pytest.mark.parametrize("argv", [["compare", "--poolers", "mean,auto"], ["train", "--pooler", "auto"]])
def test_auto_pooling_in_compare_and_train_needs_a_folder_that_declares_one(capsys, tmp_path, table, bert, argv):
    # "unknown pooler 'auto'. Did you mean 'last'?" once: auto is the folder's declared pooling, and a bare encoder
    # folder (no modules.json) declares none (tests/models/test_declared.py runs it on folders that do)
    code, _, err = run(capsys, *argv, "--data", table, "--model", bert, "--out", tmp_path / "out")
    assert code == 2 and "auto is the pooling a sentence-transformers folder declares, and" in err, err
    assert "declares none (no modules.json): name a pooler" in err and not (tmp_path / "out").exists(), err
    alone = [argv[0], argv[1], "auto"]
    code, _, err = run(capsys, *alone, "--pooler-opt", "attn_size=8", "--data", table, "--model", bert, "--out",
                       tmp_path / "out")
    assert code == 2 and "auto is the pooling the model folder declares: it takes no --pooler-opt" in err, err


def test_encode_refuses_texts_that_are_not_strings(bert):
    from poolkit import PoolkitError, encode

    for texts, says in (([None], r"texts\[0\] is NoneType None"), (["ok", 123], r"texts\[1\] is int 123")):
        with pytest.raises(PoolkitError, match=says):
            encode(texts, model=bert)


def test_default_max_length_fits_the_model(capsys, tmp_path, bert):
    texts = [" ".join(["the", ("good", "bad")[i % 2], "dog"] * (30 if i == 0 else 1)) for i in range(12)]  # 90 words
    pd.DataFrame({"text": texts, "label": [("good", "bad")[i % 2] for i in range(12)]}).to_csv(
        data := tmp_path / "long.csv", index=False)
    code, _, err = run(capsys, "compare", "--data", data, "--model", bert, "--poolers", "mean", "--folds", 2,
                       "--epochs", 1, "--out", tmp_path / "o", "--cache-dir", tmp_path / "c")
    assert code == 0, err  # 256 tokens would overrun the tiny model's 64 positions: capped to 64
    assert json.loads((tmp_path / "o" / "leaderboard.json").read_text())["rows"]


def test_argparse_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["train", "--data", "x.csv"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert err == "error: the following arguments are required: --out (see poolkit train --help)\n"


def test_embed_refuses_non_finite_vectors_unless_allowed(capsys, tmp_path):
    import torch
    from transformers import BertModel

    broken = tiny_bert_dir(tmp_path / "nan-bert")
    model = BertModel.from_pretrained(broken)
    with torch.no_grad():
        model.embeddings.LayerNorm.weight.fill_(float("nan"))
    model.save_pretrained(broken)
    capsys.readouterr()  # the save's progress bar
    texts = tmp_path / "t.csv"
    pd.DataFrame({"text": ["the good dog", "a cat"]}).to_csv(texts, index=False)
    out = tmp_path / "e.npy"
    code, _, err = run(capsys, "embed", "--model", broken, "--data", texts, "--out", out, "--quiet")
    assert code == 2 and "2 of 2 vectors hold NaN or inf" in err and "--allow-nonfinite" in err, err
    assert err.count("\n") == 1 and not out.exists()
    code, _, err = run(capsys, "embed", "--model", broken, "--data", texts, "--out", out, "--quiet",
                       "--allow-nonfinite")
    assert code == 0, err


def test_debug_shows_the_traceback(tmp_path, table, bert):
    with pytest.raises(Exception, match="unknown pooler"):
        main(["--debug", "compare", "--data", str(table), "--model", bert, "--poolers", "nope", "--out",
              str(tmp_path / "o")])


def test_train_then_predict_end_to_end(capsys, tmp_path, table, bert):
    out = tmp_path / "model"
    code, stdout, err = run(capsys, "train", "--data", table, "--model", bert, "--pooler", "attention",
                            "--pooler-opt", "attn_size=16", "--folds", 2, "--epochs", 2, "--batch-size", 8,
                            "--encoder-lr", 1e-3, "--precision", "no", "--out", out)
    assert code == 0, err
    assert "accuracy" in stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["primary_metric"] == "accuracy" and metrics["n_folds"] == 2
    assert metrics["config"]["pooler"] == {"name": "attention", "attn_size": 16}  # the one spec
    assert (metrics["config"]["encoder_lr"], metrics["config"]["precision"]) == (1e-3, "no")
    assert sorted(p.name for p in out.glob("fold_*")) == ["fold_0", "fold_1"]
    assert len(pd.read_csv(out / "oof.csv")) == 40

    test = tmp_path / "test.csv"
    pd.DataFrame({"id": [7, 8, 9], "text": ["the good dog", "the bad dog sat", "a dog"]}).to_csv(test, index=False)
    preds = tmp_path / "preds.csv"
    code, stdout, err = run(capsys, "predict", "--model", out, "--data", test, "--out", preds)
    assert code == 0, err
    frame = pd.read_csv(preds)
    assert list(frame["id"]) == [7, 8, 9]  # the input's rows and columns, in order
    assert set(frame["prediction"]) <= {"good", "bad"}
    probs = frame[["prob_bad", "prob_good"]].to_numpy()
    assert abs(probs.sum(axis=1) - 1).max() < 1e-5

    before = preds.read_bytes()
    code, _, err = run(capsys, "predict", "--model", out, "--data", test, "--out", preds)
    assert code == 2 and "--force" in err and preds.read_bytes() == before
    assert run(capsys, "predict", "--model", out, "--data", test, "--out", preds, "--force")[0] == 0
    code, _, err = run(capsys, "predict", "--model", tmp_path, "--data", test, "--out", tmp_path / "p2.csv")
    assert code == 2 and "no trained model" in err
    code, stdout, _ = run(capsys, "predict", "--model", out / "fold_1", "--data", test, "--out", tmp_path / "p3.csv")
    assert code == 0 and "1 model(s)" in stdout  # one fold folder: that model alone
    code, _, err = run(capsys, "predict", "--model", out, "--data", test, "--out", tmp_path / "p.tsv.gz")
    assert code == 0 and pd.read_csv(tmp_path / "p.tsv.gz", sep="\t")["id"].tolist() == [7, 8, 9]
    for bad, message in [("p.xlsx", "poolkit cannot write .xlsx"), ("p.csv", "more than the model's 64 positions")]:
        extra = ["--max-length", 65] if bad == "p.csv" else []
        code, _, err = run(capsys, "predict", "--model", out, "--data", test, "--out", tmp_path / bad, *extra)
        assert code == 2 and message in err and err.count("\n") == 1 and not (tmp_path / bad).exists()

    code, _, err = run(capsys, "embed", "--model", out, "--data", test, "--out", tmp_path / "e.npy")
    assert code == 2 and "fold_0" in err  # a run of two folds: embed names one to pick

    unfinished = tmp_path / "unfinished"  # fold 1 still training: no metrics.json yet
    shutil.copytree(out, unfinished)
    (unfinished / "metrics.json").unlink()
    (unfinished / "fold_1").rename(unfinished / "fold_1.partial")
    code, _, err = run(capsys, "predict", "--model", unfinished, "--data", test, "--out", tmp_path / "p4.csv")
    assert code == 2 and "unfinished run (1 of 2 folds" in err and "--allow-incomplete" in err
    assert err.count("\n") == 1 and not (tmp_path / "p4.csv").exists()
    code, stdout, _ = run(capsys, "predict", "--model", unfinished, "--data", test, "--out", tmp_path / "p4.csv",
                          "--allow-incomplete")
    assert code == 0 and "1 model(s)" in stdout
    code, stdout, err = run(capsys, "embed", "--model", out / "fold_0", "--data", test, "--out", tmp_path / "e.npy")
    assert code == 0 and "attention pooling" in stdout, err


def test_train_refuses_an_existing_out_and_resumes(capsys, tmp_path, table, bert):
    out = tmp_path / "m"
    base = ["train", "--data", table, "--model", bert, "--epochs", 1, "--batch-size", 8, "--out", out]
    assert run(capsys, *base)[0] == 0
    code, _, err = run(capsys, *base)
    assert code == 2 and "--force" in err and "--resume" in err
    assert run(capsys, *base, "--resume")[0] == 0  # nothing left to do: the finished fold is kept


@pytest.mark.parametrize("command", ["train", "embed"])
@pytest.mark.parametrize("pooler", ["mean,max", "default"])
def test_pooler_takes_one_name(capsys, tmp_path, table, bert, command, pooler):
    out = tmp_path / ("v.npy" if command == "embed" else "run")
    code, _, err = run(capsys, command, "--data", table, "--model", bert, "--pooler", pooler, "--out", out)
    assert code == 2 and "--pooler takes one pooler name" in err and err.count("\n") == 1 and not out.exists()


def test_the_zoo_times_each_pooler_at_one_thread_and_gives_the_threads_back(bert, monkeypatch):
    """Catches zoo timings at the default thread count (a 2-thread bmm made mean look 100x slower than max on a
    loaded machine) and a run that leaves torch at one thread."""
    import torch

    import poolkit.demo as demo

    seen = []
    real_build = demo.build_pooler

    def recording(name, hidden_size, num_layers):
        pooler = real_build("mean", hidden_size, num_layers)
        pooler.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
        return pooler

    monkeypatch.setattr(demo, "build_pooler", recording)
    monkeypatch.setattr(demo, "list_poolers", lambda: ["mean"])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        [row] = demo.run_zoo(bert, repeats=3)
        assert seen == [1] * 4 and torch.get_num_threads() == 2 and row["ms"] > 0
    finally:
        torch.set_num_threads(before)
