"""TextEncoder / poolkit.encode and `poolkit embed`: texts -> vectors, on a tiny random-init BERT."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

import poolkit
from poolkit import PoolkitError, TextEncoder
from poolkit.cli import main
from poolkit.models import PooledModel
from tiny_models import tiny_bert_dir

TEXTS = ["the cat sat on the mat", "a dog", "the big red dog ran very fast and the cat sat", "one",
         "good and bad", ""]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return tiny_bert_dir(tmp_path_factory.mktemp("bert"), hidden=32)


def one_by_one(path, texts, pool, encoder=None):
    """Each text alone (no padding at all) through the encoder (default: the one in ``path``), pooled by
    ``pool(encoder_output, mask)``."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    encoder = (encoder or AutoModel.from_pretrained(path)).eval()
    rows = []
    with torch.no_grad():
        for text in texts:
            batch = tokenizer([text], return_tensors="pt")
            out = encoder(**batch, output_hidden_states=True)
            rows.append(pool(out, batch["attention_mask"]))
    return torch.cat(rows)


@pytest.mark.parametrize("batch_size", [1, 4, 32])
def test_mean_embeddings_equal_each_text_encoded_alone_in_input_order(bert, batch_size):
    vectors = TextEncoder(bert, "mean", device="cpu").encode(TEXTS, batch_size=batch_size)
    mask_mean = lambda out, m: (out.last_hidden_state * m[..., None]).sum(1) / m.sum(1, keepdim=True)  # noqa: E731
    expected = one_by_one(bert, TEXTS, mask_mean)
    assert vectors.shape == (len(TEXTS), 32) and vectors.dtype == torch.float32
    assert torch.allclose(vectors, expected, atol=1e-5)


def test_layer_pooler_normalisation_and_the_one_call_form(bert):
    encoder = TextEncoder(bert, "mean_layers", device="cpu", normalize=True, last_n=2, token_pooler="mean")
    vectors = encoder.encode(TEXTS, batch_size=2)
    assert torch.allclose(vectors.norm(dim=-1), torch.ones(len(TEXTS)), atol=1e-5)

    def mean_of_layers(out, m):
        pooled = torch.stack([(h * m[..., None]).sum(1) / m.sum(1, keepdim=True) for h in out.hidden_states[-2:]])
        return torch.nn.functional.normalize(pooled.mean(0), dim=-1)

    assert torch.allclose(vectors, one_by_one(bert, TEXTS, mean_of_layers), atol=1e-5)
    again = poolkit.encode(TEXTS, bert, "mean_layers", normalize=True, device="cpu", last_n=2, token_pooler="mean")
    assert torch.allclose(again, vectors, atol=1e-6)  # other batches, other padding: rounding only


def test_a_trained_pooled_model_embeds_with_its_own_pooler(bert, tmp_path):
    torch.manual_seed(0)
    model = PooledModel.from_encoder(bert, pooler={"name": "attention", "attn_size": 8},
                                     task="classification", num_labels=2).eval()
    model.save_pretrained(tmp_path / "fold_0")
    AutoTokenizer.from_pretrained(bert).save_pretrained(tmp_path / "fold_0")
    encoder = TextEncoder(str(tmp_path / "fold_0"), device="cpu")
    assert encoder.pooler.name == "attention"
    expected = one_by_one(tmp_path / "fold_0", TEXTS, lambda out, m: model.pooler(out.last_hidden_state, m),
                          encoder=model.encoder)
    assert torch.allclose(encoder.encode(TEXTS, batch_size=3), expected, atol=1e-5)
    with pytest.raises(PoolkitError, match="own pooler"):
        TextEncoder(str(tmp_path / "fold_0"), "mean")


def test_bad_requests_are_refused_in_one_line(bert):
    with pytest.raises(PoolkitError, match="random"):
        TextEncoder(bert, "attention")
    assert TextEncoder(bert, "attention", allow_untrained=True, attn_size=8).encode(["a dog"]).shape == (1, 32)
    encoder = TextEncoder(bert, "cls")
    with pytest.raises(PoolkitError, match="single string"):
        encoder.encode("a dog")
    assert encoder.encode([]).shape == (0, 32)
    with pytest.raises(PoolkitError, match="unknown pooler"):
        TextEncoder(bert, "avrage_pool")
    with pytest.raises(PoolkitError, match="mixed precision"):
        TextEncoder(bert, precision="fp8")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_embed_command_writes_every_format_and_never_overwrites(capsys, tmp_path, bert):
    table = tmp_path / "in.csv"
    pd.DataFrame({"id": range(len(TEXTS)), "text": TEXTS}).to_csv(table, index=False)
    expected = TextEncoder(bert, "max", device="cpu").encode(TEXTS).numpy()

    code, out, err = run(capsys, "embed", "--data", table, "--model", bert, "--pooling", "max",
                         "--out", tmp_path / "v.npy", "--quiet")
    assert code == 0, err
    assert "6 embeddings of dimension 32" in out
    assert np.allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-6)

    assert run(capsys, "embed", "--data", table, "--model", bert, "--pooling", "max", "--out",
               tmp_path / "v.parquet", "--quiet")[0] == 0
    frame = pd.read_parquet(tmp_path / "v.parquet")
    assert list(frame["id"]) == list(range(len(TEXTS))) and list(frame.columns) == ["id", "text", "embedding"]
    assert np.allclose(np.stack(frame["embedding"]), expected, atol=1e-6)

    assert run(capsys, "embed", "--data", table, "--model", bert, "--pooling", "max", "--out",
               tmp_path / "v.csv", "--quiet")[0] == 0
    wide = pd.read_csv(tmp_path / "v.csv")
    assert list(wide.columns[:2]) == ["id", "text"] and wide.shape == (6, 2 + 32)
    assert np.allclose(wide[[f"emb_{j}" for j in range(32)]].to_numpy(), expected, atol=1e-5)

    assert run(capsys, "embed", "--data", table, "--model", bert, "--pooling", "max", "--out",
               tmp_path / "v.csv.gz", "--quiet")[0] == 0
    assert (tmp_path / "v.csv.gz").read_bytes()[:2] == b"\x1f\x8b"  # gzip, not a plain CSV named .gz
    assert pd.read_csv(tmp_path / "v.csv.gz").equals(wide)

    before = (tmp_path / "v.npy").read_bytes()
    code, _, err = run(capsys, "embed", "--data", table, "--model", bert, "--out", tmp_path / "v.npy")
    assert code == 2 and "--force" in err and err.count("\n") == 1
    assert (tmp_path / "v.npy").read_bytes() == before
    assert run(capsys, "embed", "--data", table, "--model", bert, "--out", tmp_path / "v.npy", "--force",
               "--quiet")[0] == 0


@pytest.mark.parametrize("args,message", [
    (["--out", "v.txt"], "poolkit cannot write .txt"),
    (["--out", "v.xlsx"], "poolkit cannot write .xlsx"),
    (["--out", "v.parquet.gz"], "poolkit cannot write .parquet.gz"),
    (["--out", "v.npy", "--max-length", "4096"], "more than the model's"),
    (["--out", "v.npy", "--text-col", "txt"], "column 'txt' not found"),
    (["--out", "v.npy", "--pooling", "attention"], "--allow-untrained"),
    (["--out", "v.npy", "--pooling", "atention"], "unknown pooler"),
])
def test_embed_command_bad_input(capsys, tmp_path, bert, args, message):
    table = tmp_path / "in.csv"
    pd.DataFrame({"text": TEXTS}).to_csv(table, index=False)
    args = [tmp_path / a if a.startswith("v.") else a for a in args]
    code, _, err = run(capsys, "embed", "--data", table, "--model", bert, *args)
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.glob("v.*"))


def test_dim_keeps_the_first_dimensions_then_normalises(bert, capsys, tmp_path):
    # catches normalising before truncating (the kept part would not have unit norm) and the last dims kept
    full = TextEncoder(bert, "mean").encode(TEXTS)
    short = TextEncoder(bert, "mean", dim=12, normalize=True)
    assert short.dim == 12
    torch.testing.assert_close(short.encode(TEXTS), torch.nn.functional.normalize(full[:, :12], dim=-1))
    for bad in (0, 33, 2.5):
        with pytest.raises(PoolkitError, match="`dim` must be a number of dimensions from 1 to the pooler's 32"):
            TextEncoder(bert, "mean", dim=bad)
    table = tmp_path / "in.csv"
    pd.DataFrame({"text": TEXTS}).to_csv(table, index=False)
    code, _, _ = run(capsys, "embed", "--data", table, "--model", bert, "--dim", 8, "--out", tmp_path / "v.npy")
    assert code == 0 and np.load(tmp_path / "v.npy").shape == (len(TEXTS), 8)


@pytest.mark.slow
def test_packaged_minilm_truncated_matches_sentence_transformers_truncate_dim():
    from sentence_transformers import SentenceTransformer

    from poolkit.data.builtin import load_builtin
    from poolkit.models.encoders import resolve_model

    texts = load_builtin("embedded").texts[:32]
    ours = TextEncoder(pooler="mean", normalize=True, dim=128, device="cpu").encode(texts, batch_size=16)
    theirs = SentenceTransformer(resolve_model(None), device="cpu", truncate_dim=128).encode(
        texts, batch_size=16, normalize_embeddings=True, convert_to_tensor=True)
    assert ours.shape == theirs.shape == (32, 128)
    assert (ours - theirs.float()).abs().max() < 1e-5


@pytest.mark.slow
def test_packaged_minilm_matches_sentence_transformers_encode():
    from sentence_transformers import SentenceTransformer

    from poolkit.data.builtin import load_builtin
    from poolkit.models.encoders import resolve_model

    texts = load_builtin("embedded").texts[:48]
    ours = TextEncoder(pooler="mean", normalize=True, device="cpu").encode(texts, batch_size=16)
    theirs = SentenceTransformer(resolve_model(None), device="cpu").encode(texts, batch_size=16,
                                                                           convert_to_tensor=True)
    cosine = torch.nn.functional.cosine_similarity(ours, theirs.float(), dim=-1)
    assert cosine.min() > 0.99999


def test_embed_command_reads_a_builtin_dataset_with_its_targets(capsys, tmp_path, bert):
    out = tmp_path / "depth.parquet"
    code, _, err = run(capsys, "embed", "--data", "builtin:embedded-depth", "--model", bert, "--out", out,
                       "--max-length", 16, "--quiet")
    assert code == 0, err
    frame = pd.read_parquet(out)
    assert list(frame.columns) == ["text", "depth", "embedding"] and len(frame) == 2000
    assert frame["depth"].between(1, 30).all() and len(frame["embedding"][0]) == 32


def test_a_built_pooler_is_used_as_it_is(bert):
    """A trained pooler object embeds with its own weights (not a fresh random copy of its spec)."""
    pooler = poolkit.get_pooler("attention", hidden_size=32, attn_size=8)
    with torch.no_grad():
        pooler.score[2].weight.mul_(5)
    encoder = TextEncoder(bert, pooler, device="cpu")
    assert encoder.pooler is pooler
    tok = encoder.tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        states = encoder.encoder(**tok).last_hidden_state
        expected = pooler(states, tok["attention_mask"])
    torch.testing.assert_close(encoder.encode(TEXTS[:2]), expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(PoolkitError, match="used as it is"):
        TextEncoder(bert, poolkit.get_pooler("mean", hidden_size=16), device="cpu")


def test_an_encoder_whose_weights_do_not_match_its_config_is_refused_in_one_line(bert, tmp_path, capsys):
    # issue 32: a checkpoint saved under another key prefix loaded with every weight at random, and embed wrote its
    # vectors with exit 0 (transformers said so only in a load report). Catches the check left out of a loader,
    # and BERT's unused pooler head (missing from many checkpoints) refused with the rest
    import shutil

    from safetensors.torch import load_file, save_file

    from poolkit.models.encoders import load_encoder

    prefixed, headless = tmp_path / "prefixed", tmp_path / "headless"
    for folder in (prefixed, headless):
        shutil.copytree(bert, folder)
    weights = load_file(f"{bert}/model.safetensors")
    save_file({f"encoder.{key}": value for key, value in weights.items()}, prefixed / "model.safetensors")
    save_file({k: v for k, v in weights.items() if not k.startswith("pooler.")}, headless / "model.safetensors")
    for load in (TextEncoder, load_encoder, PooledModel.from_encoder):
        with pytest.raises(PoolkitError, match=r"prefixed: \d+ of the encoder's weights are not in its files "
                                               r"\(embeddings\..*transformers would start them at random"):
            load(str(prefixed))
    reference = TextEncoder(bert, "mean").encode(["the cat sat"])
    assert torch.equal(TextEncoder(str(headless), "mean").encode(["the cat sat"]), reference)
    table = tmp_path / "t.csv"
    pd.DataFrame({"text": ["the cat sat", "a dog"]}).to_csv(table, index=False)
    assert main(["embed", "--data", str(table), "--model", str(prefixed), "--out", str(tmp_path / "v.npy")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not in its files" in err and "LOAD REPORT" not in err
    assert not (tmp_path / "v.npy").exists()


def test_a_pickle_holding_more_than_tensors_is_refused_plainly_with_its_conversion(bert, tmp_path, capsys):
    # issue 32 item 15: torch's own refusal ("re-running with weights_only=False will likely succeed") invited the
    # unsafe load. Catches that message passed through, a pickle of plain tensors refused with it, and a conversion
    # line that does not give the same model back
    import os
    import shlex
    import shutil
    import subprocess
    import sys

    import numpy as np
    from safetensors.torch import load_file

    plain, mixed = tmp_path / "plain", tmp_path / "mixed"
    weights = load_file(f"{bert}/model.safetensors")
    for folder, extra in ((plain, {}), (mixed, {"step": np.arange(3)})):
        shutil.copytree(bert, folder)
        (folder / "model.safetensors").unlink()
        torch.save({**weights, **extra}, folder / "pytorch_model.bin")
    reference = TextEncoder(bert, "mean").encode(["the cat sat"])
    assert torch.equal(TextEncoder(str(plain), "mean").encode(["the cat sat"]), reference)  # tensors only: loaded
    for load in (TextEncoder, PooledModel.from_encoder):
        with pytest.raises(PoolkitError, match=r"mixed: its pickled weights \(pytorch_model.bin\) hold objects "
                                               r"besides tensors, and poolkit never unpickles those"):
            load(str(mixed))
    table = tmp_path / "t.csv"
    pd.DataFrame({"text": ["the cat sat", "a dog"]}).to_csv(table, index=False)
    assert main(["embed", "--data", str(table), "--model", str(mixed), "--out", str(tmp_path / "v.npy")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "weights_only=False will likely succeed" not in err
    command = err.split("convert it to safetensors: ")[1].split(" and move ")[0]
    subprocess.run([sys.executable if part == "python" else part for part in shlex.split(command)], check=True,
                   env={**os.environ, "PYTHONWARNINGS": "ignore"})
    (mixed / "pytorch_model.bin").unlink()
    assert torch.equal(TextEncoder(str(mixed), "mean").encode(["the cat sat"]), reference)
