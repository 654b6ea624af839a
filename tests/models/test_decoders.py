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
