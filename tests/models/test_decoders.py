"""Decoder embedders (GPT-2 and Llama style, tiny and random, built offline with a tokenizer that has no pad token):
pooled at the EOS appended to each text, kept by truncation, the same under left or right padding."""

from __future__ import annotations

import pytest
import torch

from poolkit.errors import PoolkitError
from poolkit.models.encoders import load_encoder, load_tokenizer
from poolkit.models.text_encoder import TextEncoder
from tiny_models import tiny_decoder_dir

TEXTS = ["the cat sat on the mat", "a dog", "good", "very bad red mat and a big blue dog ran fast one two three"]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def decoder(request, tmp_path_factory) -> str:
    return tiny_decoder_dir(tmp_path_factory.mktemp(request.param) / "model", kind=request.param)


def alone(folder: str, ids: list[int]) -> torch.Tensor:
    """The decoder's last hidden state at the last of ``ids``, the text run alone (no padding, no batch)."""
    model = load_encoder(folder).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]


def test_last_token_pooling_reads_the_appended_eos_of_each_text_alone(decoder):
    """Catches no EOS appended (the vector of the last word), a pad pooled (the batch's padding read), the missing
    pad token failing inside transformers."""
    tokenizer = load_tokenizer(decoder)
    assert tokenizer.pad_token == "<eos>"  # the fallback: the folder's tokenizer has none
    encoder = TextEncoder(decoder, "last")
    assert encoder.append_eos
    vectors = encoder.encode(TEXTS, batch_size=4)
    eos = tokenizer.eos_token_id
    for text, vector in zip(TEXTS, vectors):
        ids = tokenizer(text)["input_ids"]
        torch.testing.assert_close(vector, alone(decoder, ids + [eos]), rtol=1e-4, atol=1e-5)
    without = TextEncoder(decoder, "last", append_eos=False).encode(TEXTS[:1])
    torch.testing.assert_close(without[0], alone(decoder, tokenizer(TEXTS[0])["input_ids"]), rtol=1e-4, atol=1e-5)


def test_truncation_keeps_the_final_eos(decoder):
    tokenizer = load_tokenizer(decoder)
    vector = TextEncoder(decoder, "last", max_length=5).encode(TEXTS[3:])
    ids = tokenizer(TEXTS[3])["input_ids"][:4] + [tokenizer.eos_token_id]
    torch.testing.assert_close(vector[0], alone(decoder, ids), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pooler", ["last", "mean"])
def test_a_tokenizer_that_pads_on_the_left_gives_the_same_vectors(decoder, tmp_path, pooler):
    kind = "llama" if "llama" in decoder else "gpt2"
    left = tiny_decoder_dir(tmp_path / "left", kind=kind, padding_side="left")
    assert load_tokenizer(left).padding_side == "left"
    torch.testing.assert_close(TextEncoder(left, pooler).encode(TEXTS, batch_size=4),
                               TextEncoder(decoder, pooler).encode(TEXTS, batch_size=1), rtol=1e-4, atol=1e-5)


def test_mean_pooling_appends_nothing_and_append_eos_needs_an_eos(decoder):
    assert not TextEncoder(decoder, "mean").append_eos
    assert TextEncoder(decoder, "mean", append_eos=True).append_eos
    from tiny_models import tiny_bert_dir

    bert = tiny_bert_dir(__import__("pathlib").Path(decoder).parent / "bert")
    assert not TextEncoder(bert, "last").append_eos  # BERT ends in [SEP] and has no EOS: nothing to append
    with pytest.raises(PoolkitError, match="the tokenizer has no EOS token"):
        TextEncoder(bert, "last", append_eos=True)


def bidirectional_alone(folder: str, ids: list[int]) -> torch.Tensor:
    """The mean of the decoder's last hidden states over ``ids`` run alone, every attention module switched to
    non-causal (LLM2Vec's way: ``is_causal = False``, no mask): the reference for bidirectional_attention."""
    model = load_encoder(folder).eval()
    for module in model.modules():
        if hasattr(module, "is_causal"):
            module.is_causal = False
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).last_hidden_state[0].mean(0)


def test_bidirectional_attention_lets_every_token_see_the_whole_text(decoder, tmp_path, monkeypatch):
    """Issue 28 item 6. Catches the switch not reaching the model (still causal), padding attended in a batch, the
    first token unchanged by later ones, and an encoder (already bidirectional) or the autocast path let through."""
    tokenizer = load_tokenizer(decoder)
    encoder = TextEncoder(decoder, "mean", bidirectional_attention=True)
    vectors = encoder.encode(TEXTS, batch_size=4)  # padded batches
    for text, vector in zip(TEXTS, vectors):
        torch.testing.assert_close(vector, bidirectional_alone(decoder, tokenizer(text)["input_ids"]), rtol=1e-4,
                                   atol=1e-5)
    assert not torch.allclose(vectors, TextEncoder(decoder, "mean").encode(TEXTS, batch_size=4), atol=1e-4)
    assert encoder.settings()["bidirectional_attention"] is True
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path / "cache"))  # the exported graph holds the mask too
    torch.testing.assert_close(TextEncoder(decoder, "mean", bidirectional_attention=True, backend="onnx").encode(
        TEXTS, batch_size=4), vectors, rtol=1e-4, atol=1e-5)
    with pytest.raises(PoolkitError, match="this encoder already attends both ways"):
        from tiny_models import tiny_bert_dir
        TextEncoder(tiny_bert_dir(tmp_path / "bert"), "mean", bidirectional_attention=True)
    with pytest.raises(PoolkitError, match="float32 only"):
        TextEncoder(decoder, "mean", bidirectional_attention=True, precision="bf16")


def test_a_model_that_stays_causal_under_the_switch_is_refused(decoder, monkeypatch):
    # catches a switch taken on trust: a model that ignores the 4-D mask would embed causally and say otherwise
    from poolkit.models import text_encoder

    monkeypatch.setattr(text_encoder, "bidirectional_mask", lambda mask, dtype: mask)  # as if the model ignored it
    with pytest.raises(PoolkitError, match="does not take a bidirectional mask"):
        TextEncoder(decoder, "mean", bidirectional_attention=True)


def test_compares_cache_pools_last_at_the_eos_and_every_other_pooler_at_the_text_alone(decoder, tmp_path,
                                                                                        monkeypatch):
    # catches the cache pooling `last` at the last word (so the board's `last` is not the exported model's), the EOS
    # left in the mean summary or the token states a learned pooler reads, and a model that attends both ways
    # served from one such encoding
    import numpy as np

    from poolkit.pooling import build_pooler
    from poolkit.training import features as features_module
    from poolkit.training.features import encode_features

    tokenizer = load_tokenizer(decoder)
    cache = encode_features(TEXTS, decoder, max_length=32, cache_dir=tmp_path / "c", progress=False,
                            poolers=["last", "attention"], summaries=["mean"])
    assert cache.meta["plan"]["append_eos"]
    rows, hidden = np.arange(len(TEXTS)), cache.hidden_size
    for name in ("last", "mean"):
        states, mask = cache.inputs(rows, build_pooler(name, hidden))
        pooled = build_pooler(name, hidden)(states[-1], mask)
        torch.testing.assert_close(pooled, TextEncoder(decoder, name).encode(TEXTS), rtol=1e-2, atol=2e-3)
    states, mask = cache.batch(rows, all_layers=False)
    for i, text in enumerate(TEXTS):
        ids = tokenizer(text)["input_ids"]
        assert int(mask[i].sum()) == len(ids)  # the text's own tokens, the EOS left out
        model = load_encoder(decoder).eval()
        with torch.no_grad():
            expected = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        torch.testing.assert_close(states[-1][i, : len(ids)], expected, rtol=1e-2, atol=2e-3)
    monkeypatch.setattr(features_module, "is_causal", lambda *args: False)
    with pytest.raises(PoolkitError, match="attends both ways, so that EOS would change the states"):
        encode_features(TEXTS, decoder, max_length=32, cache=False, progress=False, poolers=["last", "mean"])
    alone_last = encode_features(TEXTS, decoder, max_length=32, cache=False, progress=False, poolers=["last"])
    assert alone_last.meta["plan"]["append_eos"]  # `last` alone needs no causal model


def test_train_and_predict_pool_a_decoder_at_its_appended_eos(decoder, tmp_path):
    # catches train's batches or predict's without the EOS the saved model is run with elsewhere (TextEncoder)
    import numpy as np

    from poolkit.data import TableData
    from poolkit.models import PooledModel
    from poolkit.training.config import TrainConfig
    from poolkit.training.finetune import fit
    from poolkit.training.prediction import predict_outputs

    texts = [f"{w} {x}" for w in ("good", "bad", "fine", "poor") for x in ("cat", "dog", "mat", "day", "sun")]
    data = TableData(texts, np.arange(len(texts)) % 2, "classification", ["a", "b"], ("label",), "text", "toy")
    config = TrainConfig(model=decoder, pooler="last", folds=2, epochs=1, batch_size=4, max_length=16, seed=1)
    fit(config, data, tmp_path / "run", progress=False)
    fold = tmp_path / "run" / "fold_0"
    model, tokenizer = PooledModel.from_pretrained(fold).eval(), load_tokenizer(str(fold))
    saved = np.load(fold / "test_outputs.npz")
    with torch.no_grad():
        by_hand = torch.stack([model(input_ids=torch.tensor([tokenizer(texts[i])["input_ids"] +
                                                             [tokenizer.eos_token_id]])).logits[0]
                               for i in saved["test_rows"]]).numpy()
    np.testing.assert_allclose(saved["outputs"], by_hand, rtol=1e-4, atol=1e-5)
    scores, _ = predict_outputs(fold, [texts[i] for i in saved["test_rows"]], progress=False)
    probabilities = np.exp(by_hand - by_hand.max(axis=1, keepdims=True))
    np.testing.assert_allclose(scores, probabilities / probabilities.sum(axis=1, keepdims=True), atol=1e-4)


def test_explain_runs_a_decoder_pooled_at_its_last_token_with_the_eos_appended(decoder):
    # catches explain tokenising without the EOS (its weights then belong to another vector than TextEncoder's:
    # the last word's) and the EOS shown as a word of the text
    from poolkit.explain import Explainer

    tokenizer = load_tokenizer(decoder)
    for text, item in zip(TEXTS, Explainer(decoder, "last").explain(TEXTS).items):
        assert item.words[-1] == tokenizer.eos_token and item.spans[-1] is None
        assert "".join(item.words[:-1]).replace(" ", "") == text.replace(" ", "")
        assert item.weights[-1] == pytest.approx(1.0) and sum(item.weights[:-1]) == pytest.approx(0.0)
