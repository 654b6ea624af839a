"""The quick starts of the docs pages the README links (issue 33 item 1, last part): every command line and Python
block of each linked page is run, or says why not; a page's lines run in page order in one folder of small tables
(tests/quick_starts.py), each as written or with the substitution named here and why, and then its Python blocks in
page order in one namespace. Every run has the default model replaced by a tiny random BERT (the packaged MiniLM
would take minutes here). The parse test of test_readme_commands.py reads every poolkit line of these pages too."""

from __future__ import annotations

from pathlib import Path

import pytest
from quick_starts import (decided, linked_pages, python_blocks, reader_folder, run_line, shell_lines, substituted,
                          variants)

SMALLER = "fewer folds and epochs than written, to fit the suite's time"
#: per page, the lines run, in page order, by their first words: the substitutions made (old, new) and why
RUN = {
    "embeddings.md": {
        "poolkit evaluate --data pairs.csv --task retrieval --text-col query --pair-col doc": ([], "as written, with "
                                                                                                "its optional parts"),
        "poolkit evaluate --data sts.csv --task similarity --text-col a": ([], "as written"),
        "poolkit evaluate --data builtin:wordnet-examples --task retrieval --pooler cls": ([], "as written"),
        "poolkit compare --data pairs.csv --task retrieval --text-col query": ([("", "--epochs 2 --folds 2")],
                                                                              SMALLER),
        "poolkit compare --data sts.csv --task similarity --text-col a": ([("", "--epochs 2 --folds 2")], SMALLER),
        "poolkit compare --data builtin:wordnet-examples --task retrieval --poolers":
            ([("", "--epochs 1 --folds 2 --limit 200")], SMALLER + "; 200 of the 2,000 pairs"),
    },
    "explain.md": {
        "poolkit train --data builtin:embedded --pooler adapool": ([("", "--folds 2 --epochs 1 --limit 300")],
                                                                   SMALLER + "; 300 of the 3,000 rows"),
        "poolkit explain --model runs/adapool --data builtin:embedded --limit 500": ([], "as written"),
        "poolkit explain --model runs/adapool --text": ([], "as written"),
    },
    "onnx.md": {
        "poolkit export-onnx --out graph/ --int8": ([], "as written"),
        "poolkit export-onnx --model runs/x/fold_0": ([], "as written, after `poolkit train` has written runs/x, "
                                                          "which the line assumes"),
        "python examples/serve_onnx.py graph/": ([], "as written, from the repository's examples/"),
    },
    "scale.md": {
        "poolkit embed --data corpus.parquet --out vectors.npy": ([], "as written"),
        "poolkit embed --data corpus.csv --out vectors.parquet --window 8192": ([], "as written"),
    },
    "task-arithmetic.md": {
        "poolkit train --data a.csv --train-only attention --frozen-head 2": ([("", "--folds 2 --epochs 1")], SMALLER),
        "poolkit train --data b.csv --train-only attention --frozen-head 2": ([("", "--folds 2 --epochs 1")], SMALLER),
        "poolkit merge --runs runs/a runs/b --data a.csv b.csv --alpha-search": ([], "as written"),
        "poolkit predict --model merged/a --data new.csv": ([], "as written"),
    },
}
#: the lines not run on any linked page, by their first words, and why
NOT_RUN = {
    "poolkit bench": "minutes to hours each; benchmarks/papers/tests runs each bench on a tiny config, and the parse "
                     "test reads each line's options",
    ".venv/bin/python benchmarks/": "a benchmark: it times this machine and writes a committed result file; "
                                    "benchmarks/tests runs the performance scripts on tiny sizes",
    "make bench": "the benchmarks above, all of them",
    "flock /tmp/poolkit-bench.lock": "a benchmark under the shared bench queue (as above)",
    ".venv/bin/python scripts/docs.py --write": "rewrites a committed page; scripts/tests/test_docs.py runs "
                                                "docs.py --check over every page (the same renderers)",
    "python scripts/docs.py --write": "as the line above",
    ".venv/bin/python scripts/peer_suites.py": "rewrites a committed result file (docs/reliability/peers.json) "
                                               "from tests/peers, which make test runs",
    "pip install": "installs from PyPI (no network in the suite); make install covers the extras",
    "accelerate launch --num_processes 8": "eight processes (GPUs as written): tests/training/test_distributed.py "
                                           "launches embed, compare and train in two CPU processes",
    "torchrun --nproc_per_node 8": "as the line above",
}
#: per page, the Python blocks run after its lines, in page order in one namespace, by their first lines: the
#: substitutions made and why
BLOCKS = {
    "channel-spatial.md": {"import poolkit\n\npoolkit.list_blocks()": ([], "as written")},
    "explain.md": {"import poolkit.explain as px\ntexts = ": ([('"path/to/encoder"', "TINY_BERT")],
                                                    "the placeholder path becomes a name bound to the tiny BERT's "
                                                    "folder")},
    "sets.md": {"import poolkit, torch\n\nx, mask = ": ([], "as written"),
                "positions = ": ([], "as written, after the block above (its pooler, x and mask)")},
}


def page_named(name: str) -> Path:
    return next(page for page in linked_pages() if page.name == name)


@pytest.mark.parametrize("page", linked_pages(), ids=lambda page: page.name)
def test_every_line_and_block_of_a_linked_page_is_run_or_says_why_not(page):
    # catches a line or block added to a linked page with no run and no reason, and a RUN or BLOCKS entry whose
    # line or block is gone
    lines, runs, blocks = shell_lines(page), RUN.get(page.name, {}), BLOCKS.get(page.name, {})
    assert [line for line in lines if decided(line, runs) is None and decided(line, NOT_RUN) is None] == []
    assert [start for start in runs if not any(decided(line, {start: 0}) for line in lines)] == []
    assert [b.splitlines()[0] for b in python_blocks(page) if not any(b.startswith(s) for s in blocks)] == []
    assert [s for s in blocks if not any(b.startswith(s) for b in python_blocks(page))] == []


def test_the_tables_name_only_linked_pages():
    # catches an entry for a page the README no longer links (it would never be checked)
    assert set(RUN) | set(BLOCKS) <= {page.name for page in linked_pages()}


@pytest.mark.slow  # a page's commands one after another on a tiny BERT
@pytest.mark.parametrize("name", sorted(set(RUN) | set(BLOCKS)))
def test_a_linked_pages_quick_start_runs_in_order_in_one_folder(name, monkeypatch, tmp_path):
    from poolkit.cli import main

    page = page_named(name)
    work = reader_folder(monkeypatch, tmp_path)
    if name == "onnx.md":
        assert main(["train", "--data", "train.csv", "--target-col", "label", "--pooler", "attention", "--folds", "2",
                     "--epochs", "1", "--out", "runs/x"]) == 0
    failed = []
    for line in shell_lines(page):
        if (start := decided(line, RUN.get(name, {}))) is not None:
            variant = substituted(variants(line)[-1], RUN[name][start][0], f"{name}'s line {line!r}")
            if (code := run_line(variant)) != 0:
                failed.append((variant, code))
    assert failed == []
    namespace = {"TINY_BERT": str(tmp_path / "tiny-bert")}
    for block in python_blocks(page):
        start = next(s for s in BLOCKS.get(name, {}) if block.startswith(s))
        block = substituted(block, BLOCKS[name][start][0], f"{name}'s block {start!r}")
        exec(compile(block, f"{name} block {start.splitlines()[0]!r}", "exec"), namespace)
    produced = {"embeddings.md": "metrics.json", "explain.md": "one.html", "onnx.md": "graph/model-int8.onnx",
                "scale.md": "vectors.parquet", "task-arithmetic.md": "predictions.csv"}
    assert name not in produced or (work / produced[name]).is_file()
