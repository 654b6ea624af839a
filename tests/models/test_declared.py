"""The pooling a sentence-transformers folder declares (pooler="auto", the default for such a folder) gives
sentence-transformers' own vectors: every pooling mode, several at once, Dense layers, Normalize, named prompts
with and without their tokens in the pool. The folders are built by sentence-transformers itself on a tiny BERT."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from poolkit import encode
from poolkit.errors import PoolkitError
from poolkit.models.declared import read_declared
from poolkit.models.text_encoder import TextEncoder
from poolkit.pooling.masking import skip_first_tokens
from tiny_models import tiny_bert_dir

st = pytest.importorskip("sentence_transformers")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from sentence_transformers import models as st_models

TEXTS = ["the cat sat on the mat", "a dog ran", "good", "very bad red mat and a big blue dog ran fast", "one two"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> str:
    return tiny_bert_dir(tmp_path_factory.mktemp("declared") / "bert")


def st_folder(bert: str, folder: Path, modes, dense: list[dict] = (), normalize: bool = True,
              include_prompt: bool = True, **model_options) -> "st.SentenceTransformer":
    """A sentence-transformers model of the tiny BERT with these modules, saved to ``folder``."""
    torch.manual_seed(0)
    word = st_models.Transformer(bert, max_seq_length=32)
    modules = [word, st_models.Pooling(32, pooling_mode=modes, include_prompt=include_prompt)]
    width = modules[1].get_embedding_dimension()
    for options in dense:
        modules.append(st_models.Dense(width, options.get("out", 8), activation_function=options.get("act", torch.nn.Tanh()),
                                       use_residual=options.get("residual", False)))
        width = modules[-1].out_features
    if normalize:
        modules.append(st_models.Normalize())
    model = st.SentenceTransformer(modules=modules, device="cpu", **model_options)
    model.save(str(folder))
    return st.SentenceTransformer(str(folder), device="cpu")


def gap(ours: torch.Tensor, theirs) -> float:
    return float((ours - torch.as_tensor(theirs)).abs().max())


@pytest.mark.parametrize("modes", ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken",
                                   ("cls", "mean", "max")])
def test_every_declared_mode_with_dense_and_normalize_gives_sentence_transformers_vectors(bert, tmp_path, modes):
    """Catches a mode mapped to the wrong pooler, modes concatenated in another order, the Dense layer or its
    activation skipped, Normalize left out."""
    model = st_folder(bert, tmp_path / "m", modes, dense=[{"out": 8}])
    expected = model.encode(TEXTS, convert_to_tensor=True, batch_size=2)
    encoder = TextEncoder(str(tmp_path / "m"))  # the declared pooling is the default
    assert encoder.dim == 8 and encoder.pooling.endswith("+dense+normalize (declared)")
    assert gap(encoder.encode(TEXTS, batch_size=2), expected) <= 1e-5
    assert gap(encode(TEXTS, model=str(tmp_path / "m"), pooler="auto"), expected) <= 1e-5


def test_two_dense_layers_identity_and_residual_without_normalize(bert, tmp_path):
    model = st_folder(bert, tmp_path / "m", "mean", normalize=False,
                      dense=[{"out": 16, "act": torch.nn.Identity(), "residual": True}, {"out": 16, "residual": True}])
    encoder = TextEncoder(str(tmp_path / "m"), "auto")
    assert encoder.pooling == "mean+dense+dense (declared)"
    assert gap(encoder.encode(TEXTS), model.encode(TEXTS, convert_to_tensor=True)) <= 1e-5


def test_the_older_config_with_one_flag_per_mode_and_a_transformer_in_a_subfolder(bert, tmp_path):
    """sentence-transformers 2's layout: the encoder in 0_Transformer/, `pooling_mode_*_tokens` flags (cls and mean:
    concatenated cls first)."""
    model = st_folder(bert, tmp_path / "m", ("cls", "mean"), normalize=False)
    expected = model.encode(TEXTS, convert_to_tensor=True)
    root = tmp_path / "m"
    (root / "0_Transformer").mkdir()
    for path in list(root.iterdir()):
        if path.is_file() and path.name not in ("modules.json", "config_sentence_transformers.json"):
            shutil.move(str(path), root / "0_Transformer" / path.name)
    modules = json.loads((root / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 32, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}))
    assert read_declared(root).modes == ("cls", "mean")
    assert gap(TextEncoder(str(root)).encode(TEXTS), expected) <= 1e-5
    assert gap(st.SentenceTransformer(str(root), device="cpu").encode(TEXTS, convert_to_tensor=True), expected) <= 1e-6


def test_an_explicit_pooler_replaces_the_declared_pooling_and_the_modules_after_it(bert, tmp_path):
    st_folder(bert, tmp_path / "m", "cls", dense=[{"out": 8}])
    raw = TextEncoder(str(tmp_path / "m"), "mean")
    assert raw.pooling == "mean" and raw.dim == 32
    plain = TextEncoder(bert, "mean").encode(TEXTS)
    assert gap(raw.encode(TEXTS), plain) <= 1e-6
    assert not torch.allclose(plain.norm(dim=-1), torch.ones(len(TEXTS)))  # Normalize is gone too
    assert TextEncoder(bert).pooling == "mean"  # a folder that declares nothing: mean, as before


@pytest.mark.parametrize("include_prompt", [True, False])
def test_named_and_default_prompts_with_and_without_their_tokens_in_the_pool(bert, tmp_path, include_prompt):
    """The folder's default prompt applies when none is given, a named one when asked, and with include_prompt=False
    the prompt's tokens are left out of the mean (catches the prompt not prepended, its length miscounted by the
    trailing [SEP], the prompt pooled anyway)."""
    prompts = {"query": "one two three ", "document": "red "}
    model = st_folder(bert, tmp_path / "m", "mean", include_prompt=include_prompt, prompts=prompts,
                      default_prompt_name="query")
    folder = str(tmp_path / "m")
    encoder = TextEncoder(folder)
    assert encoder.prompt == prompts["query"] and encoder.include_prompt is include_prompt
    assert gap(encoder.encode(TEXTS), model.encode(TEXTS, convert_to_tensor=True)) <= 1e-5
    assert gap(encoder.encode(TEXTS, prompt_name="document"),
               model.encode(TEXTS, prompt_name="document", convert_to_tensor=True)) <= 1e-5
    assert gap(TextEncoder(folder, prompt="").encode(TEXTS), model.encode(TEXTS, prompt="", convert_to_tensor=True)) \
        <= 1e-5
    with_prompt = TextEncoder(folder, include_prompt=True).encode(TEXTS)
    without = TextEncoder(folder, include_prompt=False).encode(TEXTS)
    assert gap(with_prompt, without) > 1e-3


def test_the_pool_mask_drops_the_first_real_tokens_under_either_padding():
    right = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    left = right.flip(1)
    assert skip_first_tokens(right, 2).tolist() == [[0, 0, 1, 1, 0], [0, 0, 1, 0, 0]]
    assert skip_first_tokens(left, 2).tolist() == [[0, 0, 0, 1, 1], [0, 0, 0, 0, 1]]


def test_what_auto_pooling_refuses_in_one_line(bert, tmp_path):
    with pytest.raises(PoolkitError, match="has no modules.json"):
        TextEncoder(bert, "auto")
    st_folder(bert, tmp_path / "m", "mean", dense=[{"out": 8}])
    folder = tmp_path / "m"
    assert TextEncoder(str(folder), prompt_name="query").prompt == ""  # sentence-transformers saves empty ones
    with pytest.raises(PoolkitError, match="`prompt_name` 'passage' is not one of the model's prompts"):
        TextEncoder(str(folder), prompt_name="passage")
    with pytest.raises(PoolkitError, match="takes no options"):
        TextEncoder(str(folder), "auto", p=3)
    dense = next(folder.glob("2_Dense*"))
    config = json.loads((dense / "config.json").read_text())
    (dense / "config.json").write_text(json.dumps({**config, "activation_function": "os.system"}))
    with pytest.raises(PoolkitError, match="is not a torch.nn class; poolkit imports no other code"):
        TextEncoder(str(folder))
    assert TextEncoder(str(folder), "mean").dim == 32  # an explicit pooler reads none of it
    modules = json.loads((folder / "modules.json").read_text())
    modules.insert(2, {"idx": 9, "name": "9", "path": "9_LSTM", "type": "sentence_transformers.models.LSTM"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(PoolkitError, match="declares LSTM, which poolkit does not rebuild"):
        TextEncoder(str(folder))


def test_layer_poolers_pool_tokens_with_the_declared_pooling_unless_told(bert, tmp_path):
    """Issue 33 item 4: a layer pooler on a mean-trained encoder pooled each layer's tokens with cls and ranked below
    cls. Catches the declared pooling not used, a token_pooler the user gave overridden, the default changed for an
    encoder that declares nothing, and a leaderboard label that hides how the tokens are pooled."""
    import pandas as pd

    from poolkit.training import api

    st_folder(bert, tmp_path / "st", "mean")
    folder = str(tmp_path / "st")
    assert TextEncoder(folder, "weighted_layer").pooler.get_config()["token_pooler"] == "mean"
    assert TextEncoder(folder, {"name": "weighted_layer", "token_pooler": "cls"}).pooler.get_config()[
        "token_pooler"] == "cls"
    assert TextEncoder(bert, "weighted_layer").pooler.get_config()["token_pooler"] == "cls"  # nothing declared
    texts = [f"the {a} {b}" for a in ("big", "small", "red", "blue") for b in ("cat", "dog", "mat")] * 2
    pd.DataFrame({"text": texts, "label": ["good", "bad"] * 12}).to_csv(tmp_path / "t.csv", index=False)
    said = []
    board = api.compare(tmp_path / "t.csv", poolers="weighted_layer,mean_layers,mean", model=folder, folds=2,
                        epochs=1, cache_dir=tmp_path / "cache", baseline=False, progress=False, report=said.append)
    assert sorted(row["pooler"] for row in board.rows) == ["mean", "mean_layers+mean", "weighted_layer+mean"]
    assert any("pool each layer's tokens with mean, the pooling the model declares" in line for line in said)


def test_compare_and_train_take_auto_as_the_pooling_the_folder_declares(bert, tmp_path):
    # catches auto read as mean whatever the folder declares, several modes not concatenated in their order, a
    # folder with Dense layers compared as if its pooling were the whole, and train ignoring the declaration
    import pandas as pd

    from poolkit.training import api

    st_folder(bert, tmp_path / "cls", "cls")
    st_folder(bert, tmp_path / "two", ("cls", "max"), normalize=False)
    st_folder(bert, tmp_path / "dense", "mean", dense=[{"out": 8}])
    texts = [f"the {a} {b}" for a in ("big", "small", "red", "blue") for b in ("cat", "dog", "mat")] * 2
    pd.DataFrame({"text": texts, "label": ["good", "bad"] * 12}).to_csv(tmp_path / "t.csv", index=False)
    said = []
    board = api.compare(tmp_path / "t.csv", poolers="auto,attention", model=str(tmp_path / "cls"), folds=2,
                        epochs=1, cache_dir=tmp_path / "cache", baseline=False, progress=False, report=said.append)
    assert sorted(row["pooler"] for row in board.rows) == ["attention", "cls"]
    assert any(line.startswith("auto: cls, the pooling the model folder declares (cls+normalize; a Normalize")
               for line in said), said
    board = api.compare(tmp_path / "t.csv", poolers=["auto"], model=str(tmp_path / "two"), folds=2, epochs=1,
                        cache_dir=tmp_path / "cache", baseline=False, progress=False)
    assert board.rows[0]["config"]["name"] == "concat" and board.rows[0]["config"]["poolers"] == ["cls", "max"]
    metrics = api.train(tmp_path / "t.csv", tmp_path / "run", pooler="auto", model=str(tmp_path / "cls"), folds=1,
                        epochs=1, batch_size=8, max_length=16, progress=False)
    assert metrics["config"]["pooler"] == {"name": "cls"}
    for call in (lambda: api.compare(tmp_path / "t.csv", poolers="auto", model=str(tmp_path / "dense")),
                 lambda: api.train(tmp_path / "t.csv", tmp_path / "run2", pooler="auto",
                                   model=str(tmp_path / "dense"))):
        with pytest.raises(PoolkitError, match="declares mean\\+dense\\+normalize, and .* trains no Dense layers "
                                               "after a pooler: pass mean to compare its pooling alone"):
            call()


def test_pooled_model_auto_keeps_the_dense_layers_and_normalize_through_save_and_load(bert, tmp_path, monkeypatch):
    """Issue 28 item 1: ``PooledModel.from_encoder(folder, pooler="auto")`` is the folder's own embedding. Catches the
    Dense layers dropped (or left at fresh random weights), Normalize skipped, a head sized to the pooler instead of
    the Dense output, and a saved model that loads back without the modules after its pooler (in PooledModel and in
    TextEncoder, which embeds with a saved model's own pooling)."""
    from poolkit.models.pooled_model import PooledModel
    from poolkit.models.text_encoder import TextEncoder as Encoder

    model = st_folder(bert, tmp_path / "st", ("cls", "mean"), dense=[{"out": 8}, {"out": 6, "act": torch.nn.ReLU()}])
    expected = model.encode(TEXTS, convert_to_tensor=True)
    folder = str(tmp_path / "st")
    embedder = PooledModel.from_encoder(folder, pooler="auto", task="retrieval").eval()
    assert embedder.output_dim == 6 and embedder.config.after["normalize"]
    tokenizer = Encoder(folder).tokenizer
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        assert gap(embedder(**batch).pooled, expected) <= 1e-5
    classifier = PooledModel.from_encoder(folder, pooler="auto", task="classification", num_labels=3)
    assert classifier.head.in_features == 6
    embedder.save_pretrained(tmp_path / "saved")
    tokenizer.save_pretrained(tmp_path / "saved")
    loaded = PooledModel.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        assert gap(loaded(**batch).pooled, expected) <= 1e-5
    assert gap(Encoder(str(tmp_path / "saved")).encode(TEXTS), expected) <= 1e-5
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path / "cache"))  # the exported graph holds the Dense layers too
    assert gap(Encoder(str(tmp_path / "saved"), backend="onnx").encode(TEXTS), expected) <= 1e-5
    with pytest.raises(PoolkitError, match="has no modules.json"):
        PooledModel.from_encoder(bert, pooler="auto")
