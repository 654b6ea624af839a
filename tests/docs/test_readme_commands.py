"""The README's command lines (issue 33 item 1, second part): every ``poolkit`` line of its shell blocks, and of
the docs pages it links, parses with poolkit's own parser (a flag renamed in the code and not in the docs fails
here), the launch lines that say they work on CPUs set what a CPU launch needs, and the lines a reader runs one
after another in one folder run, in README order, each as written or with the substitution this file names and
why. A line added to the README with neither a run nor a reason fails."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SHELL = re.compile(r"```bash\n(.*?)```", re.S)
OPTIONAL = re.compile(r"\s\[([^\]]+)\]")
ELIDED = "..."

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
    "accelerate launch": "several processes (GPUs as written): tests/training/test_distributed.py launches embed, "
                         "compare and train in two CPU processes",
    "ACCELERATE_USE_CPU=1 torchrun": "several processes: tests/training/test_distributed.py launches them so",
}


def linked_pages() -> list[Path]:
    """The docs pages the README links, whose quick starts a reader goes on to."""
    return sorted({README.parent / name for name in re.findall(r"docs/[a-z_-]+\.md", README.read_text())})


def shell_lines(page: Path = README) -> list[str]:
    """Every command line of ``page``'s bash blocks, continuations joined, comments dropped."""
    lines = []
    for block in SHELL.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                lines.append(" ".join(line.split("#", 1)[0].split()))
    return lines


def variants(line: str) -> list[str]:
    """The line without its ``[optional part]`` s, and with them."""
    return [OPTIONAL.sub("", line), OPTIONAL.sub(r" \1", line)] if OPTIONAL.search(line) else [line]


def poolkit_argv(line: str) -> list[str] | None:
    """The arguments poolkit's parser gets from ``line`` (``poolkit ...`` or a launcher's ``-m poolkit.cli ...``),
    else None."""
    words = shlex.split(line)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if words[:1] == ["poolkit"]:
        return words[1:]
    if "poolkit.cli" in words and words[words.index("poolkit.cli") - 1] == "-m":
        return words[words.index("poolkit.cli") + 1:]
    return None


def decided(line: str, table: dict) -> str | None:
    """The longest first words of ``table`` that ``line`` starts with (spacing aside), else None."""
    squeezed = " ".join(line.split())
    return max((start for start in table if squeezed.startswith(" ".join(start.split()))), key=len, default=None)


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


def test_readme_launch_lines_that_say_cpu_set_what_a_cpu_launch_needs():
    # the README's torchrun line said "also works on CPU (gloo)" without ACCELERATE_USE_CPU=1, and stopped with
    # "2 processes were launched but accelerate sees 1" as written (issue 33)
    text = README.read_text()
    cpu = [line for block in SHELL.findall(text) for line in block.splitlines()
           if ("torchrun" in line or "accelerate launch" in line) and "CPU" in line.split("#", 1)[-1]]
    assert cpu and all("ACCELERATE_USE_CPU=1" in line.split("#", 1)[0] for line in cpu)


def tables(folder: Path) -> None:
    """The files the README's lines read, small: a labelled table with two numeric targets, pairs for retrieval
    and similarity, two tables for merge and a corpus."""
    import pandas as pd

    from tiny_models import WORDS

    rows = range(80)
    texts = [" ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11)) for i in rows]
    labels = ["good" if i % 3 else "bad" for i in rows]
    train = pd.DataFrame({"text": texts, "label": labels, "y1": [i % 7 * 0.5 for i in rows],
                          "y2": [(i * 3) % 5 for i in rows]})
    train.to_csv(folder / "train.csv", index=False)
    train.head(20).to_csv(folder / "test.csv", index=False)
    pd.DataFrame({"text": texts[:40], "doc": [f"{t} very good" for t in texts[:40]]}).to_csv(folder / "pairs.csv",
                                                                                            index=False)
    pd.DataFrame({"text": texts[:40], "b": texts[1:41], "score": [i % 6 for i in range(40)]}).to_csv(
        folder / "sts.csv", index=False)
    train[["text", "y1"]].rename(columns={"y1": "y"}).head(40).to_csv(folder / "a.csv", index=False)
    train[["text", "y2"]].rename(columns={"y2": "y"}).tail(40).to_csv(folder / "b.csv", index=False)
    pd.DataFrame({"text": texts}).to_parquet(folder / "corpus.parquet")


@pytest.mark.slow  # about 20 poolkit commands one after another on a tiny BERT
def test_the_readme_command_lines_run_in_order_in_one_folder(monkeypatch, tmp_path):
    from poolkit.cli import main
    from poolkit.models import encoders
    from tiny_models import tiny_bert_dir

    tiny = tiny_bert_dir(tmp_path / "tiny-bert")
    work = tmp_path / "work"
    work.mkdir()
    tables(work)
    monkeypatch.setattr(encoders, "default_model_path", lambda: tiny)
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(work)
    for setup in ("a", "b"):
        assert main(["train", "--data", f"{setup}.csv", "--target-col", "y", "--folds", "2", "--epochs", "1",
                     "--out", f"runs/{setup}"]) == 0
    failed = []
    for line in shell_lines():
        start = decided(line, RUN)
        if start is None:
            continue
        substitutions, _ = RUN[start]
        variant = variants(line)[-1]  # with its optional parts (the parse test reads both)
        for old, new in substitutions:
            assert old in variant, f"the substituted text {old!r} is gone from the README line {line!r}"
            variant = variant.replace(old, new, 1) if old else f"{variant} {new}"
        argv = poolkit_argv(variant)
        if argv is None:  # the one python line
            words = shlex.split(variant)
            code = subprocess.run([sys.executable, str(README.parent / words[1]), *words[2:]],
                                  capture_output=True, text=True).returncode
        else:
            code = main(argv)
        if code != 0:
            failed.append((variant, code))
    assert failed == []
    assert (work / "report.html").is_file() and any((work / "pics").glob("*.png"))
    assert (work / "graph" / "model-int8.onnx").is_file() and (work / "corpus-int8.npy").is_file()
