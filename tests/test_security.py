"""Trust and safety: poolkit never runs code from a model folder unless asked, and never unpickles."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from poolkit import PoolkitError
from poolkit.cli import main
from poolkit.models import PooledModel
from poolkit.models.encoders import check_model_folder, load_encoder, load_tokenizer, remote_code
from poolkit.models.text_encoder import TextEncoder
from tiny_models import tiny_bert_dir

CODE = '''
from pathlib import Path
from transformers import BertModel

Path(__file__).resolve().parent.joinpath("{marker}").write_text("ran")  # where the folder's code says it ran


class CustomBert(BertModel):
    pass
'''


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> str:
    return tiny_bert_dir(tmp_path_factory.mktemp("bert"))


def with_code(bert: str, folder: Path, file: str = "config.json") -> Path:
    """A copy of the tiny BERT whose ``file`` maps AutoModel to Python code in the folder; the code, if run, writes
    ran.txt beside the copy transformers imports it from."""
    shutil.copytree(bert, folder)
    (folder / "custom_bert.py").write_text(CODE.format(marker="ran.txt"))
    config = json.loads((folder / file).read_text())
    config["auto_map"] = {"AutoModel": "custom_bert.CustomBert"}
    (folder / file).write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("file", ["config.json", "tokenizer_config.json"])
def test_model_folder_code_is_refused_by_every_loader(bert, tmp_path, file):
    folder = with_code(bert, tmp_path / "evil", file)
    named = rf"{file} maps auto_map classes to code in the folder.*trust_remote_code=True"
    for load in (TextEncoder, load_tokenizer, load_encoder, PooledModel.from_encoder, PooledModel.from_pretrained):
        with pytest.raises(PoolkitError, match=named):
            load(str(folder))
    with remote_code(True):  # the ambient opt-in (fine-tuning's loaders) and an explicit one
        assert check_model_folder(folder) is True
    assert check_model_folder(folder, trust_remote_code=True) is True
    assert check_model_folder(bert) is False


@pytest.mark.parametrize("command", [
    ["embed", "--data", "{data}", "--out", "{tmp}/e.npy"],
    ["compare", "--data", "{data}", "--poolers", "mean", "--folds", "2", "--epochs", "1", "--out", "{tmp}/c",
     "--cache-dir", "{tmp}/cache"],
    ["train", "--data", "{data}", "--out", "{tmp}/t", "--epochs", "1"],
    ["predict", "--data", "{data}", "--out", "{tmp}/p.csv"],
])
def test_cli_refuses_model_folder_code_in_one_line(bert, tmp_path, capsys, command):
    folder = with_code(bert, tmp_path / "evil")
    if command[0] == "predict":  # a `poolkit train` fold folder whose config.json maps code
        from transformers import AutoTokenizer

        fold = tmp_path / "run" / "fold_0"
        PooledModel.from_encoder(bert).save_pretrained(fold)
        AutoTokenizer.from_pretrained(bert).save_pretrained(fold)
        (fold / "poolkit_train.json").write_text("{}")
        shutil.rmtree(folder)
        folder = with_code(str(fold), folder)
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"{w} cat,{i % 2}\n" for i, w in enumerate(["good", "bad"] * 4)))
    argv = [a.format(data=data, tmp=tmp_path) for a in command] + ["--model", str(folder)]
    capsys.readouterr()  # the setup's own output
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "config.json maps auto_map classes" in err and "--trust-remote-code" in err
    from transformers.dynamic_module_utils import HF_MODULES_CACHE

    assert not list(tmp_path.rglob("ran.txt")) and not list(Path(HF_MODULES_CACHE).rglob("custom_bert.py"))


def test_trust_remote_code_flag_runs_the_folder_code(bert, tmp_path, monkeypatch):
    import transformers.dynamic_module_utils as dynamic

    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    folder = with_code(bert, tmp_path / "custom")
    data = tmp_path / "d.csv"
    data.write_text("text\ngood cat\nbad dog\n")
    assert main(["embed", "--data", str(data), "--out", str(tmp_path / "e.npy"), "--model", str(folder),
                 "--trust-remote-code", "--quiet"]) == 0
    assert list((tmp_path / "modules").rglob("ran.txt"))  # opted in: the folder's code ran, from its cached copy


class Payload:
    """Unpickling this runs code: it creates ``path`` (what a poisoned checkpoint would do, harmlessly)."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


@pytest.fixture
def cpu_accelerate(monkeypatch):
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.parametrize("poisoned", ["optimizer.bin", "scheduler.bin", "random_states_0.pkl"])
def test_resume_refuses_a_poisoned_state_without_running_it(tmp_path, monkeypatch, cpu_accelerate, poisoned):
    import pickle

    import torch

    from dist_worker import toy_config, toy_data, toy_model_dir
    from poolkit.training import finetune

    model, out = toy_model_dir(tmp_path / "bert"), tmp_path / "run"
    config = toy_config(model, folds=1, epochs=2)
    save = finetune._Fold.save_state

    def save_then_stop(self):
        save(self)
        raise KeyboardInterrupt

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(finetune._Fold, "save_state", save_then_stop)
        finetune.fit(config, toy_data(), out, progress=False)
    state = out / "fold_0.partial" / ".state"
    assert (state / poisoned).is_file()
    marker = tmp_path / "payload-ran"
    torch.save({"state": Payload(marker)}, state / poisoned)
    if poisoned.startswith("random_states"):  # accelerate skips RNG states it cannot load, with a warning
        finetune.fit(config, toy_data(), out, resume=True, progress=False)
    else:
        with pytest.raises((pickle.UnpicklingError, PoolkitError), match="[Ww]eights only load failed"):
            finetune.fit(config, toy_data(), out, resume=True, progress=False)
    assert not marker.exists()


def test_trained_models_and_caches_hold_no_pickle(tmp_path, bert):
    """Model weights are safetensors; a feature cache whose offsets.npy is a pickle (object array) is never
    unpickled: it fails its checks and is rebuilt."""
    import numpy as np

    from poolkit.training.features import encode_features

    saved = tmp_path / "saved"
    PooledModel.from_encoder(bert).save_pretrained(saved)
    assert {f.suffix for f in saved.iterdir()} <= {".json", ".safetensors"}
    features = encode_features(["the cat", "a dog"], bert, cache_dir=tmp_path / "cache", progress=False)
    marker = tmp_path / "payload-ran"
    np.save(features.folder / "offsets.npy", np.array([Payload(marker)], dtype=object), allow_pickle=True)
    rebuilt = encode_features(["the cat", "a dog"], bert, cache_dir=tmp_path / "cache", progress=False)
    assert rebuilt.offsets.dtype == np.int64 and not marker.exists()
