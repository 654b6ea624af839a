"""The README's command lines (issue 33 item 1, second part): every ``poolkit`` line of its shell blocks, and of
the docs pages it links, parses with poolkit's own parser (a flag renamed in the code and not in the docs fails
here), the launch lines that say they work on CPUs set what a CPU launch needs, and the lines a reader runs one
after another in one folder run, in README order, each as written or with the substitution this file names and
why. A line added to the README with neither a run nor a reason fails."""

from __future__ import annotations

import pytest
import torch
from quick_starts import (ELIDED, README, decided, launched, linked_pages, poolkit_argv, reader_folder, run_line,
                          shell_lines, substituted, variants)

#: the lines run, in README order, by their first words: the substitutions made (old, new) and why. Every run
#: also has the default model replaced by a tiny random BERT (the packaged MiniLM would take minutes here).
SMALLER = "fewer folds, epochs and poolers than written, to fit the suite's time"
RUN = {
    "poolkit compare --data train.csv --text-col text --target-col label --folds 5 --finetune-top 3":
        ([("--folds 5", "--folds 2"), ("--finetune-top 3", "--finetune-top 1 --finetune-epochs 1 --poolers "
                                                            "mean,attention --epochs 2")], SMALLER),
    "poolkit compare --data train.csv --poolers mean,max attention": ([("", "--epochs 2 --folds 2")], SMALLER),
    "poolkit compare --data train.csv --folds 5 --repeats 3 --sizes 250,500,1000":
        ([("--folds 5 --repeats 3 --sizes 250,500,1000",
           "--folds 2 --repeats 2 --sizes 10,20 --poolers mean,attention --epochs 2")],
         SMALLER + "; the table has 80 rows (40 per training fold), so the sizes are smaller too"),
    "poolkit compare --data train.csv --export runs/best": ([("", "--poolers mean,attention --epochs 2 --folds 2")],
                                                            SMALLER),
    "poolkit train   --data train.csv --text-col text --target-col y1 y2 --pooler attention":
        ([("--folds 5 --epochs 4", "--folds 2 --epochs 1")], SMALLER),
    "poolkit predict --model runs/model --data test.csv --out preds.csv": ([], "as written"),
    "poolkit embed   --data test.csv --out vectors.npy --normalize": ([], "as written"),
    "poolkit embed   --model runs/model/fold_0 --data test.csv --out test.parquet": ([], "as written"),
    "poolkit evaluate --data pairs.csv --task retrieval --pair-col doc": ([], "as written"),
    "poolkit evaluate --data sts.csv --task similarity --pair-col b --target-col score": ([], "as written"),
    "poolkit evaluate --data test.csv --task regression --target-col y1 y2 --model runs/model": ([], "as written"),
    "poolkit compare --data pairs.csv --task retrieval --pair-col doc --out runs/search":
        ([("", "--poolers mean,attention --epochs 2 --folds 2")], SMALLER),
    "poolkit merge   --runs runs/a runs/b --data a.csv b.csv --alpha-search --out runs/merged":
        ([], "as written, after `poolkit train` has written runs/a (on a.csv) and runs/b (on b.csv), which the line "
             "assumes"),
    "poolkit data list": ([], "as written"),
    "poolkit embed --data corpus.parquet --out vectors.npy": ([("vectors.npy", "corpus.npy")],
                                                              "another name: the line before wrote vectors.npy"),
    "poolkit export-onnx --model runs/model/fold_0 --normalize --int8 --out graph/": ([], "as written"),
    "python examples/serve_onnx.py graph/": ([], "as written, from the repository's examples/"),
    "poolkit embed --data corpus.parquet --out vectors.npy --backend onnx-int8":
        ([("vectors.npy", "corpus-int8.npy")], "another name: an earlier line wrote vectors.npy"),
    "poolkit explain --model runs/model --data test.csv --text-col text --target-col y1 --out report.html":
        ([], "as written, with its optional --png pics/"),
}
#: the lines not run, by their first words, and why (each is still parsed by the test above when it is poolkit's)
NOT_RUN = {
    "make demo": "make demo is the README's own first step: CI and every session run it",
    "make test": "this suite is make test",
    "pip install": "installs from PyPI (no network in the suite); make install covers the extras",
    "poolkit bench": "minutes to hours each; their options are tested in benchmarks/papers/tests",
    "poolkit zoo": "times every pooler on the packaged MiniLM's states; tests/cli/test_cli.py runs it on a tiny BERT",
    "accelerate launch --num_processes": "four or eight processes on GPUs as written (without GPUs poolkit refuses "
                                         "it: tests/training/test_processes.py); tests/training/test_distributed.py "
                                         "launches embed, compare and train in two CPU processes",
    "torchrun --nproc_per_node 2": "run with its elided arguments given, in two CPU processes, by "
                                   "test_the_readme_cpu_launch_lines_train_in_two_processes",
    "accelerate launch --multi_gpu --num_processes 2": "as the line above",
}












def test_every_readme_command_line_is_run_or_says_why_not():
    # catches a command line added to the README with no run and no reason, and a RUN entry whose line is gone
    lines = shell_lines()
    assert [line for line in lines if decided(line, RUN) is None and decided(line, NOT_RUN) is None] == []
    assert sorted(start for start in RUN if not any(decided(line, {start: 0}) for line in lines)) == []


@pytest.mark.parametrize("page", [README, *linked_pages()], ids=lambda page: page.name)
def test_every_poolkit_line_of_the_readme_and_its_linked_pages_parses(page):
    # catches a flag or a command renamed in the code and not in the README or a docs page's quick start (merge's
    # --folds, say; a bench's options too) and a value the parser refuses; a line that elides its arguments ("...")
    # is parsed up to the command
    from poolkit.cli import build_parser

    refused = []
    for line in shell_lines(page):
        for variant in variants(line):
            argv = poolkit_argv(variant)
            if argv is None:
                continue
            if ELIDED in argv:
                argv = argv[:argv.index(ELIDED)] + ["--help"]
            try:
                build_parser(argv).parse_args(argv)
            except SystemExit as stop:
                if stop.code != 0:
                    refused.append(variant)
    assert refused == []


@pytest.mark.slow  # two launches of two processes each
@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA launches these lines on its GPUs")
def test_the_readme_cpu_launch_lines_train_in_two_processes(monkeypatch, tmp_path):
    # the README's torchrun line stopped with "2 processes were launched but accelerate sees 1" without
    # ACCELERATE_USE_CPU=1 (issue 33); each line that says CPUs runs as written, its elided arguments ("...") given
    lines = [line for line in shell_lines() if ELIDED in line and "-m poolkit.cli" in line]
    assert [line.split()[0] for line in lines] == ["torchrun", "accelerate"]
    work = reader_folder(monkeypatch, tmp_path)
    model = str(tmp_path / "tiny-bert")
    for k, line in enumerate(lines):
        tail = f"--model {model} --data train.csv --target-col y1 --folds 2 --epochs 1 --out runs/launch{k}"
        result = launched(line.replace(ELIDED, tail))
        out = result.stdout + result.stderr
        assert result.returncode == 0, out[-2000:]
        assert "2 process(es)" in (work / f"runs/launch{k}/train.log").read_text()
        assert out.count("test rmse") == 1  # the result line from the first process only


@pytest.mark.slow  # about 20 poolkit commands one after another on a tiny BERT
def test_the_readme_command_lines_run_in_order_in_one_folder(monkeypatch, tmp_path):
    from poolkit.cli import main

    work = reader_folder(monkeypatch, tmp_path)
    for setup in ("a", "b"):
        assert main(["train", "--data", f"{setup}.csv", "--target-col", "y", "--folds", "2", "--epochs", "1",
                     "--out", f"runs/{setup}"]) == 0
    failed = []
    for line in shell_lines():
        start = decided(line, RUN)
        if start is None:
            continue
        variant = variants(line)[-1]  # with its optional parts (the parse test reads both)
        variant = substituted(variant, RUN[start][0], f"the README line {line!r}")
        if (code := run_line(variant)) != 0:
            failed.append((variant, code))
    assert failed == []
    assert (work / "report.html").is_file() and any((work / "pics").glob("*.png"))
    assert (work / "graph" / "model-int8.onnx").is_file() and (work / "corpus-int8.npy").is_file()
