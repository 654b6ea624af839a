"""PooledModel (Hugging Face) and the sentence-transformers module, on a tiny random-init BERT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer, Trainer, TrainingArguments

from poolkit import PoolkitError
from poolkit.models import PooledModel
from poolkit.models.encoders import DEFAULT_MODEL, model_label, resolve_model
from tiny_models import tiny_bert_dir

SENTENCES = ["the cat sat on the mat", "a dog ran", "the big red dog was very fast", "one"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return tiny_bert_dir(tmp_path_factory.mktemp("tiny_bert"))


def batch(bert_dir, texts=SENTENCES, side="right", pad_to=None):
    tokenizer = AutoTokenizer.from_pretrained(bert_dir)
    tokenizer.padding_side = side
    padding = "max_length" if pad_to else True
    return tokenizer(texts, padding=padding, max_length=pad_to, return_tensors="pt")


@pytest.mark.parametrize("pooling, options", [("attention", {}), ("weighted_layer", {}),
                                               ("lstm_layers", {"rnn_hidden": 8}), ("mean_max", {}),
                                               ("adapool", {"query_index": 0})])
@pytest.mark.parametrize("task, num_labels", [("regression", 2), ("classification", 3), ("multilabel", 3)])
def test_save_and_load_give_identical_outputs(tmp_path, bert_dir, pooling, options, task, num_labels):
    model = PooledModel.from_encoder(bert_dir, pooler={"name": pooling, **options}, task=task,
                                     num_labels=num_labels).eval()
    inputs = batch(bert_dir)
    with torch.no_grad():
        before = model(**inputs, return_weights=True)
    model.save_pretrained(tmp_path / "saved")
    assert (tmp_path / "saved" / "model.safetensors").exists()
    loaded = PooledModel.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        after = loaded(**inputs)
    assert torch.equal(before.logits, after.logits)
    assert before.logits.shape == (4, num_labels) and before.weights is not None
    assert type(AutoModel.from_pretrained(tmp_path / "saved")) is PooledModel
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())["pooler"]
    assert saved == model.pooler.get_config() and saved["name"] == pooling and saved["hidden_size"] == 32


@pytest.mark.parametrize("pooling", ["cls", "attention", "weighted_layer", "last"])
def test_model_is_padding_invariant_left_or_right(bert_dir, pooling):
    """More padding, or padding on the other side, leaves the whole model's output unchanged."""
    model = PooledModel.from_encoder(bert_dir, pooler=pooling, task="regression").eval()
    with torch.no_grad():
        right = model(**batch(bert_dir)).logits
        longer = model(**batch(bert_dir, pad_to=20)).logits
        left = model(**batch(bert_dir, side="left", pad_to=20)).logits
    assert torch.allclose(right, longer, atol=1e-5)
    # Absolute position ids shift under left padding: with the positions each token has unpadded, the encoder sees
    # the same sequence, and the pooled model must give the right-padded outputs (a pooler reading padding fails).
    inputs = batch(bert_dir, side="left", pad_to=20)
    with torch.no_grad():
        placed = model(**inputs, position_ids=(inputs["attention_mask"].cumsum(1) - 1).clamp(min=0)).logits
    assert not torch.allclose(left, right, atol=1e-5)  # without them the encoder's outputs do shift
    assert torch.allclose(placed, right, atol=1e-5)


def test_only_layer_poolers_ask_for_hidden_states(bert_dir, monkeypatch):
    seen = []
    for pooling, wanted in [("mean", False), ("weighted_layer", True)]:
        model = PooledModel.from_encoder(bert_dir, pooler=pooling)
        forward = model.encoder.forward

        def spy(*args, _forward=forward, **kwargs):
            seen.append(kwargs.get("output_hidden_states"))
            return _forward(*args, **kwargs)

        monkeypatch.setattr(model.encoder, "forward", spy)
        model(**batch(bert_dir))
        assert seen[-1] is wanted


def test_losses_follow_the_task(bert_dir):
    inputs = batch(bert_dir)
    for task, labels in [("regression", torch.randn(4, 2)), ("classification", torch.tensor([0, 2, 1, 0])),
                         ("multilabel", torch.tensor([[1, 0, 1], [0, 0, 1], [1, 1, 1], [0, 0, 0]]))]:
        num = labels.shape[1] if labels.dim() == 2 else 3
        model = PooledModel.from_encoder(bert_dir, task=task, num_labels=num).eval()
        out = model(**inputs, labels=labels)
        if task == "regression":
            reference = torch.nn.functional.mse_loss(out.logits, labels)
        elif task == "classification":
            reference = torch.nn.functional.cross_entropy(out.logits, labels)
        else:
            reference = torch.nn.functional.binary_cross_entropy_with_logits(out.logits, labels.float())
        assert torch.allclose(out.loss, reference)


def test_bad_task_and_pooler(bert_dir):
    with pytest.raises(PoolkitError, match="task must be one of"):
        PooledModel.from_encoder(bert_dir, task="ranking")
    with pytest.raises(PoolkitError, match="unknown pooler"):
        PooledModel.from_encoder(bert_dir, pooler="atention")


class _Texts(torch.utils.data.Dataset):
    def __init__(self, bert_dir, n=32):
        words = ["good", "bad"]
        self.texts = [f"the {words[i % 2]} dog ran" for i in range(n)]
        self.labels = [i % 2 for i in range(n)]
        self.encoded = AutoTokenizer.from_pretrained(bert_dir)(self.texts)

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return {"input_ids": self.encoded["input_ids"][i], "attention_mask": self.encoded["attention_mask"][i],
                "labels": self.labels[i]}


@pytest.mark.parametrize("pooling", ["attention", "weighted_layer"])
def test_trains_with_the_hugging_face_trainer(tmp_path, bert_dir, pooling):
    torch.manual_seed(0)
    model = PooledModel.from_encoder(bert_dir, pooler=pooling, task="classification", num_labels=2)
    data = _Texts(bert_dir)
    from transformers import DataCollatorWithPadding
    collator = DataCollatorWithPadding(AutoTokenizer.from_pretrained(bert_dir))
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=40, per_device_train_batch_size=8,
                             learning_rate=3e-3, report_to=[], save_strategy="no", logging_steps=5,
                             use_cpu=True, seed=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
    before = trainer.evaluate(eval_dataset=data)["eval_loss"]
    trainer.train()
    after = trainer.evaluate(eval_dataset=data)["eval_loss"]
    assert after < before * 0.75, (before, after)


# -- sentence-transformers -------------------------------------------------------------------------
@pytest.mark.parametrize("pooling", ["attention", "weighted_layer", "mean"])
def test_sentence_transformers_module_round_trips(tmp_path, bert_dir, pooling):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Transformer

    from poolkit.models.st_pooling import PoolkitPooling

    word = Transformer(bert_dir, config_kwargs={"output_hidden_states": pooling == "weighted_layer"})
    pool = PoolkitPooling(32, pooling, 2)
    model = SentenceTransformer(modules=[word, pool], device="cpu")
    embeddings = model.encode(SENTENCES, convert_to_tensor=True)
    assert embeddings.shape == (4, pool.get_embedding_dimension())
    model.save(str(tmp_path / "st"))
    # sentence-transformers >= 6 imports module classes outside its namespace only when trusted.
    loaded = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    assert isinstance(loaded[1], PoolkitPooling) and loaded[1].pooler["name"] == pooling
    weights = {p.name for p in (tmp_path / "st").glob("1_*/*") if p.suffix in (".safetensors", ".bin")}
    assert weights == (set() if pooling == "mean" else {"model.safetensors"})  # issue 32, item 16: none empty
    assert torch.allclose(loaded.encode(SENTENCES, convert_to_tensor=True), embeddings, atol=1e-6)


@pytest.mark.parametrize("pooling", ["mean", "cls", "max", "last", "weighted_mean", "mean_sqrt_len"])
def test_poolers_sentence_transformers_has_save_as_its_own_pooling(tmp_path, bert_dir, pooling):
    """Issue 32, item 16: for_transformer gives sentence-transformers' Pooling for the poolers it has, so the saved
    folder loads without poolkit's module and without trust_remote_code, and pools as poolkit's pooler does."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    from poolkit.models.st_pooling import PoolkitPooling

    word = Transformer(bert_dir)
    native = PoolkitPooling.for_transformer(word, pooling)
    assert isinstance(native, Pooling)
    assert isinstance(PoolkitPooling.for_transformer(word, {"name": pooling, "on_empty": "raise"}), PoolkitPooling)
    SentenceTransformer(modules=[word, native], device="cpu").save(str(tmp_path / "st"))
    assert "poolkit" not in (tmp_path / "st" / "modules.json").read_text()
    loaded = SentenceTransformer(str(tmp_path / "st"), device="cpu")  # no trust_remote_code
    ours = SentenceTransformer(modules=[word, PoolkitPooling(32, pooling)], device="cpu")
    assert torch.allclose(loaded.encode(SENTENCES, convert_to_tensor=True), ours.encode(SENTENCES,
                                                                                        convert_to_tensor=True),
                          atol=1e-5)


def test_sentence_transformers_mean_matches_their_pooling(bert_dir):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    from poolkit.models.st_pooling import PoolkitPooling

    word = Transformer(bert_dir)
    ours = SentenceTransformer(modules=[word, PoolkitPooling(word.get_embedding_dimension(), "mean")], device="cpu")
    theirs = SentenceTransformer(modules=[word, Pooling(word.get_embedding_dimension(), "mean")], device="cpu")
    assert torch.allclose(ours.encode(SENTENCES, convert_to_tensor=True),
                          theirs.encode(SENTENCES, convert_to_tensor=True), atol=1e-5)


@pytest.mark.parametrize("mode", ["mean", "max", "weightedmean"])
def test_sentence_transformers_module_keeps_the_prompt_out_of_the_pool_as_theirs(bert_dir, tmp_path, mode):
    """PoolkitPooling(include_prompt=False) reads sentence-transformers' prompt_length feature as its own Pooling
    does (catches the prompt pooled anyway, the flag lost on save), for every prompt-free pooling with their
    equal (weightedmean: with the prompt pooled only: its weights are not position-kept, see docs/embedders.md)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    from poolkit.models.st_pooling import PoolkitPooling

    include = mode == "weightedmean"
    word = Transformer(bert_dir)
    name = {"weightedmean": "weighted_mean"}.get(mode, mode)
    ours = SentenceTransformer(modules=[word, PoolkitPooling(32, name, include_prompt=include)], device="cpu")
    theirs = SentenceTransformer(modules=[word, Pooling(32, mode, include_prompt=include)], device="cpu")
    prompt = "one two three "
    expected = theirs.encode(SENTENCES, prompt=prompt, convert_to_tensor=True)
    assert torch.allclose(ours.encode(SENTENCES, prompt=prompt, convert_to_tensor=True), expected, atol=1e-5)
    if not include:
        assert not torch.allclose(theirs.encode(SENTENCES, convert_to_tensor=True), expected, atol=1e-3)
    ours.save(str(tmp_path / "st"))
    loaded = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    assert loaded[1].include_prompt is include
    assert torch.allclose(loaded.encode(SENTENCES, prompt=prompt, convert_to_tensor=True), expected, atol=1e-5)


def test_sentence_transformers_layer_pooler_without_hidden_states_says_how(bert_dir):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Transformer

    from poolkit.models.st_pooling import PoolkitPooling

    word = Transformer(bert_dir)
    model = SentenceTransformer(modules=[word, PoolkitPooling.for_transformer(word, "weighted_layer")], device="cpu")
    with pytest.raises(PoolkitError, match="output_hidden_states"):
        model.encode(SENTENCES)


def test_a_model_saved_by_poolkit_0_1_loads_with_its_own_pooler(tmp_path, bert_dir):
    """0.1 saved the pooler as ``pooling`` + ``pooling_options``: it must not fall back to mean pooling."""
    model = PooledModel.from_encoder(bert_dir, pooler={"name": "attention", "attn_size": 16}, task="regression").eval()
    model.save_pretrained(tmp_path / "old")
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    config["pooling"], config["pooling_options"] = config.pop("pooler")["name"], {"attn_size": 16}
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    loaded = PooledModel.from_pretrained(tmp_path / "old").eval()
    assert loaded.pooler.get_config() == model.pooler.get_config()
    batch = {"input_ids": torch.tensor([[2, 5, 7, 3]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, model(**batch).logits)


def test_model_label_knows_the_packaged_model_in_another_install():
    """A result file made in another install (a clean clone's venv) records that install's path of the packaged
    model; the label must still name it (was: 'model', the folder's name)."""
    elsewhere = Path("/elsewhere/.venv/lib/site-packages") / Path(resolve_model(None)).parent.name / "model"
    assert model_label(str(elsewhere)) == DEFAULT_MODEL and model_label("/data/my-model") == "my-model"
