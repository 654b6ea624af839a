"""The ONNX backend and `poolkit export-onnx`: one graph from token ids to the final vectors, on a tiny random BERT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import poolkit
from poolkit import PoolkitError, TextEncoder
from poolkit.cli import main
from poolkit.models import PooledModel, onnx_graph
from poolkit.models.encoders import load_tokenizer
from tiny_models import tiny_bert_dir

pytest.importorskip("onnxruntime")

TEXTS = ["the cat sat on the mat", "a dog", "the big red dog ran very fast and the cat sat", "one",
         "good and bad", "", "cat " * 200]
EXAMPLE = Path(__file__).parents[2] / "examples" / "serve_onnx.py"
#: Families whose ops differ from the attention pooler's: the last real token (no int64 ArgMax), a maximum, latent
#: cross-attention, adaptive attention, a power mean (every token pooler exports alone in
#: tests/pooling/test_pooling_transforms.py).
TOKEN_POOLERS = ["last", "max", "latent", "adapool", "gem"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return tiny_bert_dir(tmp_path_factory.mktemp("bert"), hidden=32)


@pytest.fixture()
def graph_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "onnx"


@pytest.fixture()
def exports(monkeypatch):
    """Counts the exports (the cache's misses)."""
    calls = []
    real = onnx_graph.export_graph

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(onnx_graph, "export_graph", counted)
    return calls


def test_the_onnx_backend_gives_the_torch_vectors_with_a_prompt_left_out_dim_and_normalize(bert, graph_cache,
                                                                                          exports):
    """A learned pooler in the whole graph, a prompt kept out of the pool, Matryoshka dim and the L2 norm baked in:
    the session's vectors are torch's. Catches the pooler's weights, the prompt's pool mask, dim or normalize left
    out of the graph, rows in the wrong order, an export per encoder instead of one per key, and a damaged cached
    graph used as it is."""
    spec = {"name": "attention"}
    settings = dict(prompt="query: ", include_prompt=False, dim=20, normalize=True, allow_untrained=True,
                    device="cpu")
    torch.manual_seed(0)
    onnx = TextEncoder(bert, spec, backend="onnx", **settings)
    assert len(exports) == 1
    reference = TextEncoder(bert, onnx.pooler, **{k: v for k, v in settings.items() if k != "allow_untrained"})
    expected = reference.encode(TEXTS, batch_size=3)
    got = onnx.encode(TEXTS, batch_size=3)
    assert got.shape == (len(TEXTS), 20)
    assert (got - expected).abs().max() < 1e-5
    assert not torch.allclose(got, TextEncoder(bert, onnx.pooler, dim=20, normalize=True, device="cpu")
                              .encode(TEXTS), atol=1e-3)  # the prompt did change the vectors
    [folder] = [p for p in graph_cache.iterdir() if p.is_dir()]
    manifest = json.loads((folder / onnx_graph.MANIFEST).read_text())
    assert manifest["parity"]["max_abs_diff_to_torch"] < 1e-5
    assert manifest["tokenizer"]["prompt_tokens_left_out"] == 3 and manifest["dim"] == 20  # [CLS] query :
    assert manifest["session"] == {"disabled_optimizers": ["SkipLayerNormFusion"],  # what serve_onnx.py reads
                                   "config": {"session.intra_op.allow_spinning": "0"}}
    options = next(iter(onnx._sessions.values())).session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"  # and what poolkit runs
    spinning = onnx_graph.OnnxSession(folder, session_config={"session.intra_op.allow_spinning": "1"})
    assert spinning.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert onnx.settings()["backend"] == "onnx"
    again = TextEncoder(bert, onnx.pooler, backend="onnx", **{k: v for k, v in settings.items()
                                                                if k != "allow_untrained"})
    assert len(exports) == 1  # the same weights and settings: found in the cache
    assert torch.equal(again.encode(TEXTS, batch_size=3), got)
    with open(folder / onnx_graph.FLOAT_FILE, "r+b") as handle:
        handle.truncate(1000)
    with pytest.warns(UserWarning, match="damaged"):
        again = TextEncoder(bert, onnx.pooler, backend="onnx", **{k: v for k, v in settings.items()
                                                                    if k != "allow_untrained"})
    assert len(exports) == 2  # a damaged graph: exported again
    assert torch.equal(again.encode(TEXTS, batch_size=3), got)
    # another prompt (its length is baked into the graph) is another key, so another graph; its export is the one
    # above with another prompt (checking it by exporting again cost make test 7 s)
    assert onnx_graph.graph_key(again, "passage: long prompt ") != onnx_graph.graph_key(again, "query: ")


class EveryPooler(torch.nn.Module):
    """Layer poolers on every hidden state and token poolers on the last one, their vectors side by side: one graph
    exports them all."""

    kind, name = "layer", "every pooler"

    def __init__(self, layer_poolers, token_poolers):
        super().__init__()
        self.layers, self.tokens = torch.nn.ModuleList(layer_poolers), torch.nn.ModuleList(token_poolers)

    def forward(self, states, mask):
        return torch.cat([pooler(states, mask) for pooler in self.layers]
                         + [pooler(states[-1], mask) for pooler in self.tokens], dim=-1)


def test_every_layer_pooler_and_the_token_families_export_inside_the_whole_graph(bert, tmp_path):
    """export_graph's own parity check (onnxruntime against torch on texts of many lengths, in batches of another
    size than the export's) passes with all six layer poolers and five token pooler families in the embedder.
    Catches a pooler whose graph fixes the batch or sequence size (weighted_layer's inference chunking did), or
    that reads the hidden states differently once exported."""
    torch.manual_seed(4)
    encoder = TextEncoder(bert, "weighted_layer", device="cpu")
    every = EveryPooler([poolkit.get_pooler(name, hidden_size=32, num_layers=2)
                         for name in poolkit.list_poolers(kind="layer")],
                        [poolkit.get_pooler(name, hidden_size=32) for name in TOKEN_POOLERS]).eval()
    encoder.module.pooler = every
    batch = encoder.tokenizer(["a"], return_tensors="pt")
    with torch.no_grad():
        states = encoder.encoder(**batch, output_hidden_states=True).hidden_states
        encoder.module.dim = every(states, batch["attention_mask"]).shape[-1]  # no truncation
    manifest = onnx_graph.export_graph(encoder, tmp_path)
    assert manifest["parity"]["max_abs_diff_to_torch"] < 1e-5


def test_the_encoder_is_traced_with_eager_attention_and_given_its_own_back(bert, tmp_path, monkeypatch):
    """The graph is traced on the encoder's eager attention: no IsNaN guard of the scaled-dot-product decomposition
    in it (the trace on the model's own attention has one per layer), the manifest says so, the same vectors, and the
    encoder runs on its own attention again after, also when the export fails. Catches a switch that does not
    reach the encoder, and one that leaves torch's backend on the slower eager path."""
    import onnx

    encoder = TextEncoder(bert, "mean", device="cpu")
    own = encoder.encoder.config._attn_implementation
    assert own != "eager"
    manifests, ops = {}, {}
    for attention in ("eager", None):
        folder = tmp_path / str(attention)
        folder.mkdir()
        manifests[attention] = onnx_graph.export_graph(encoder, folder, attention=attention)
        ops[attention] = {node.op_type for node in onnx.load(str(folder / onnx_graph.FLOAT_FILE)).graph.node}
        assert encoder.encoder.config._attn_implementation == own
    assert onnx_graph.TRACE_ATTENTION == "eager" and manifests["eager"]["traced_attention"] == "eager"
    assert "IsNaN" in ops[None] and "IsNaN" not in ops["eager"]
    assert all(m["parity"]["max_abs_diff_to_torch"] < 1e-5 for m in manifests.values())

    seen = []

    def broken(*args, **kwargs):  # an assert in here would be caught by export_graph as an export failure
        seen.append(encoder.encoder.config._attn_implementation)
        raise RuntimeError("no")

    monkeypatch.setattr(torch.onnx, "export", broken)
    with pytest.raises(PoolkitError, match="does not export"):
        onnx_graph.export_graph(encoder, tmp_path / "eager")
    assert seen == ["eager"] and encoder.encoder.config._attn_implementation == own


def test_a_layer_pooler_and_the_int8_copy(bert, graph_cache, exports):
    """weighted_layer over attention reads every hidden state inside the graph; the int8 copy is added to the same
    cache folder (no second export), is not the float32 graph, and stays close to it."""
    torch.manual_seed(1)
    spec = {"name": "weighted_layer", "token_pooler": "attention"}
    onnx = TextEncoder(bert, spec, backend="onnx", allow_untrained=True, device="cpu")
    expected = TextEncoder(bert, onnx.pooler, device="cpu").encode(TEXTS)
    assert (onnx.encode(TEXTS) - expected).abs().max() < 1e-5
    small = TextEncoder(bert, onnx.pooler, backend="onnx-int8", device="cpu")
    assert len(exports) == 1
    vectors = small.encode(TEXTS)
    cosine = torch.nn.functional.cosine_similarity(vectors, expected)
    assert 0.9 < cosine.min() and (vectors - expected).abs().max() > 1e-6
    [folder] = [p for p in graph_cache.iterdir() if p.is_dir()]
    int8 = json.loads((folder / onnx_graph.MANIFEST).read_text())["int8"]
    assert int8["per_channel"] is True and int8["op_types"] == onnx_graph.INT8["op_types"]
    assert abs(int8["cosine_to_float32"]["min"] - 1) < 0.1


def test_export_onnx_serves_a_trained_pooler_without_torch_or_poolkit(bert, tmp_path):
    """`poolkit export-onnx` on a saved model with a (trained) attention pooler; examples/serve_onnx.py, run with
    torch, poolkit and transformers unimportable, gives TextEncoder's vectors from the folder alone, in a session
    with the manifest's session choices. Catches a graph that needs torch ops at run time, tokenizer files or settings
    missing from the folder, a pooler's weights left out, the session choices not recorded or not made."""
    torch.manual_seed(2)
    model = PooledModel.from_encoder(bert, pooler="attention")
    model.save_pretrained(tmp_path / "fold_0")
    tokenizer = load_tokenizer(bert)
    tokenizer.save_pretrained(tmp_path / "fold_0")
    out = tmp_path / "graph"
    assert main(["export-onnx", "--model", str(tmp_path / "fold_0"), "--normalize", "--int8", "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} >= {"model.onnx", "model-int8.onnx", "poolkit-onnx.json", "tokenizer.json"}
    block = "import sys\nfor name in ('torch', 'poolkit', 'transformers'):\n    sys.modules[name] = None\n"
    # and the session it makes reported: the manifest's session choices must reach it
    block += ("import onnxruntime\nmade = onnxruntime.InferenceSession\n"
              "def spy(path, options, **kw):\n"
              "    print('SESSION', options.get_session_config_entry('session.intra_op.allow_spinning'),\n"
              "          kw['disabled_optimizers'])\n"
              "    return made(path, options, **kw)\n"
              "onnxruntime.InferenceSession = spy\n")
    run = [sys.executable, "-c", block + f"import runpy; sys.argv = ['serve', *sys.argv[1:]]; "
           f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__')", str(out), "--out", str(tmp_path / "v.npy"),
           *TEXTS]
    served = subprocess.run(run, capture_output=True, text=True, timeout=120, env={**os.environ})
    assert served.returncode == 0, served.stderr[-2000:]
    assert "SESSION 0 ['SkipLayerNormFusion']" in served.stdout
    expected = TextEncoder(str(tmp_path / "fold_0"), normalize=True, device="cpu").encode(TEXTS).numpy()
    assert np.abs(np.load(tmp_path / "v.npy") - expected).max() < 1e-5
    assert "attention" in json.loads((out / "poolkit-onnx.json").read_text())["pooling"]


def test_export_onnx_refuses_to_replace_what_it_did_not_write(bert, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["export-onnx", "--model", bert, "--pooler", "mean", "--out", str(mine)]) == 2
    assert "already exists: pass --force" in capsys.readouterr().err
    assert main(["export-onnx", "--model", bert, "--pooler", "mean", "--out", str(mine), "--force"]) == 2
    assert "not a graph written by `poolkit export-onnx`" in capsys.readouterr().err
    assert (mine / "notes.txt").read_text() == "keep me"
    assert main(["export-onnx", "--model", bert, "--pooler", "mean", "--out", str(tmp_path / "no" / "g")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bad_backends_are_one_line(bert, monkeypatch):
    with pytest.raises(PoolkitError, match="`backend` must be one of torch, onnx, onnx-int8"):
        TextEncoder(bert, "mean", backend="tensorrt")
    with pytest.raises(PoolkitError, match="`precision` 'bf16' is torch's autocast"):
        TextEncoder(bert, "mean", backend="onnx", precision="bf16")
    import poolkit.extras as extras

    monkeypatch.setattr(extras, "_missing", lambda module: module == "onnxruntime")
    with pytest.raises(PoolkitError, match=r"onnxruntime, which the \[onnx\] extra installs"):
        TextEncoder(bert, "mean", backend="onnx")


def test_embed_with_the_onnx_backend_and_the_cache_commands(bert, graph_cache, tmp_path, capsys, monkeypatch):
    """embed --backend onnx writes torch's vectors, evaluate's backend gives torch's metrics; cache list shows the
    graph, cache clear removes it and leaves a user's folder in the graph cache alone, and a user's folder under the
    name of the next graph is refused, not replaced."""
    import pandas as pd

    pd.DataFrame({"text": TEXTS}).to_csv(tmp_path / "t.csv", index=False)
    args = ["embed", "--data", str(tmp_path / "t.csv"), "--model", bert, "--pooler", "mean", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "torch.npy")]) == 0
    assert main([*args, "--out", str(tmp_path / "onnx.npy"), "--backend", "onnx"]) == 0
    assert np.abs(np.load(tmp_path / "onnx.npy") - np.load(tmp_path / "torch.npy")).max() < 1e-5
    from poolkit.training.evaluation import evaluate

    pairs = pd.DataFrame({"text": TEXTS[:4], "pair": TEXTS[1:5]})
    runs = []
    real_call = onnx_graph.OnnxSession.__call__

    def counted(self, batch):
        runs.append(len(batch["input_ids"]))
        return real_call(self, batch)

    monkeypatch.setattr(onnx_graph.OnnxSession, "__call__", counted)
    scored = {backend: evaluate(pairs, "retrieval", model=bert, pooler="mean", backend=backend, progress=False)
              for backend in ("torch", "onnx")}  # the graph embed exported: the same key
    assert sum(runs) == 5  # onnx: the 5 distinct texts of the table through onnxruntime once; torch: none
    assert scored["onnx"]["metrics"] == pytest.approx(scored["torch"]["metrics"], abs=1e-6)
    user = graph_cache / ("0" * 32)
    user.mkdir()
    (user / "mine.txt").write_text("x")
    capsys.readouterr()
    assert main(["cache", "list"]) == 0
    listed = capsys.readouterr().out
    assert "1 ONNX graph(s)" in listed and "mean pooling" in listed
    assert main(["cache", "clear"]) == 0
    assert "removed 1 ONNX graph(s)" in capsys.readouterr().out
    assert [p.name for p in graph_cache.iterdir() if p.is_dir()] == [user.name] and (user / "mine.txt").is_file()
    theirs = graph_cache / onnx_graph.graph_key(TextEncoder(bert, "mean", device="cpu"), "")
    theirs.mkdir()  # a user's folder under the name the next graph takes: refused, not replaced
    (theirs / "mine.txt").write_text("y")
    with pytest.raises(PoolkitError, match="poolkit did not write it"):
        TextEncoder(bert, "mean", backend="onnx", device="cpu")
    assert (theirs / "mine.txt").read_text() == "y"


def test_a_failed_export_leaves_nothing_in_the_cache(bert, graph_cache, monkeypatch):
    """Catches the staging folder (a whole graph when the parity check fails) left behind unseen by cache list and
    cache clear."""
    def failing(encoder, folder, prompt=None, int8=False):
        (folder / onnx_graph.FLOAT_FILE).write_bytes(b"x" * 1000)
        raise PoolkitError("the ONNX graph of pooler 'mean' gives vectors 1 away from torch's: use backend 'torch'")

    monkeypatch.setattr(onnx_graph, "export_graph", failing)
    with pytest.raises(PoolkitError, match="1 away from torch"):
        TextEncoder(bert, "mean", backend="onnx", device="cpu")
    assert [p.name for p in graph_cache.iterdir() if not p.name.endswith(".lock")] == []
