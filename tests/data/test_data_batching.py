"""Length-grouped batch sampler and the tokenizing collator (offline tokenizer from a tiny vocab)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import BertTokenizerFast

from poolkit.data import LengthGroupedBatchSampler, TableData, TextCollator, TextDataset, make_loader
from poolkit.errors import PoolkitError

WORDS = "the cat dog sat on a mat ran far away".split()


@pytest.fixture
def tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
    return BertTokenizerFast.from_pretrained(str(tmp_path))  # local folder, no download; v5 ignores vocab_file=


def random_lengths(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 500, size=n)


def flatten(batches) -> list[int]:
    return [i for b in batches for i in b]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("n,batch_size", [(1000, 32), (7, 3), (64, 64), (5, 10)])
def test_every_index_exactly_once(shuffle, n, batch_size):
    sampler = LengthGroupedBatchSampler(random_lengths(n), batch_size, shuffle=shuffle, mega_batches=4)
    batches = list(sampler)
    assert sorted(flatten(batches)) == list(range(n))
    assert len(batches) == len(sampler)
    assert sum(len(b) < batch_size for b in batches) <= 1


def test_drop_last_drops_only_the_short_batch():
    sampler = LengthGroupedBatchSampler(random_lengths(103), 10, shuffle=True, mega_batches=3, drop_last=True)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 10 and all(len(b) == 10 for b in batches)
    assert len(set(flatten(batches))) == 100


def test_training_batches_are_length_homogeneous():
    lengths = random_lengths(3200)
    sampler = LengthGroupedBatchSampler(lengths, 32, shuffle=True, mega_batches=50)
    spread = np.mean([np.ptp(lengths[b]) for b in sampler])
    random_spread = np.mean([np.ptp(lengths[b]) for b in np.random.default_rng(1).permutation(3200).reshape(-1, 32)])
    assert spread < random_spread / 10  # ~500 / 50 batches per bucket vs ~470 for random batches


def test_training_order_is_seeded_and_changes_every_epoch():
    lengths = random_lengths(500)
    a = LengthGroupedBatchSampler(lengths, 16, seed=7)
    b = LengthGroupedBatchSampler(lengths, 16, seed=7)
    epoch0, epoch1 = list(a), list(a)
    assert epoch0 == list(b) and epoch1 == list(b)
    assert epoch0 != epoch1
    assert epoch0 != list(LengthGroupedBatchSampler(lengths, 16, seed=8))
    sizes = [np.ptp(lengths[x]) for x in epoch0]
    assert sizes != sorted(sizes) and sizes != sorted(sizes, reverse=True)  # batch order is shuffled


def test_inference_sorts_longest_first_and_restores_order():
    lengths = random_lengths(50)
    sampler = LengthGroupedBatchSampler(lengths, 8, shuffle=False)
    order = flatten(sampler)
    assert list(lengths[order]) == sorted(lengths, reverse=True)
    assert order == flatten(sampler)  # no randomness across passes
    outputs = torch.tensor(order) * 10  # what a model would emit per row, in batch order
    np.testing.assert_array_equal(sampler.restore(outputs).numpy(), np.arange(50) * 10)
    np.testing.assert_array_equal(sampler.restore(np.array(order)), np.arange(50))
    assert sampler.restore([f"row{i}" for i in order]) == [f"row{i}" for i in range(50)]


def test_inference_batches_keep_to_the_token_budget():
    # catches max_tokens ignored (the longest rows batched batch_size at a time), a budget counted on the real
    # tokens instead of rows x the batch's longest, a batch left empty when one row passes the budget, and the
    # order or restore changed by the budget
    lengths = np.array([3, 90, 5, 40, 200, 4, 41, 6, 7, 3])
    sampler = LengthGroupedBatchSampler(lengths, 4, shuffle=False, max_tokens=100)
    batches = list(sampler)
    assert [len(b) for b in batches] == [1, 1, 2, 4, 2]  # 200 > 100 still goes alone; 41 + 40 fit; then 4 rows
    assert all(len(b) * lengths[b].max() <= 100 for b in batches[1:])
    assert flatten(batches) == flatten(LengthGroupedBatchSampler(lengths, 4, shuffle=False))
    np.testing.assert_array_equal(sampler.restore(np.array(flatten(batches))), np.arange(10))


def test_sorted_token_batches_budget_is_batch_size_times_the_mean_length(tokenizer):
    # catches a budget set by the longest text (what made the memory peak grow with the data)
    from poolkit.data.batching import sorted_token_batches

    texts = [" ".join(["cat"] * 30)] + ["dog"] * 15  # 32 tokens once, 3 tokens 15 times: mean 4.8 -> 5
    sampler, batches = sorted_token_batches(tokenizer, texts, 64, 8, "cpu")
    assert [len(rows) for rows, _ in batches] == [1, 8, 7]  # 1 x 32 tokens <= 8 x 5; then 8 x 3 <= 40
    assert sampler.max_tokens == 40


def test_restore_refuses_a_shuffled_sampler():
    with pytest.raises(PoolkitError, match="shuffle=False"):
        LengthGroupedBatchSampler([1, 2, 3], 2, shuffle=True).restore([0, 1, 2])


def test_bad_batch_size():
    with pytest.raises(PoolkitError, match="batch size must be at least 1"):
        LengthGroupedBatchSampler([1, 2], 0)


def test_collator_pads_to_the_longest_in_batch(tokenizer):
    batch = [("the cat sat", np.int64(1)), ("the dog ran far away on a mat", np.int64(0))]
    out = TextCollator(tokenizer, max_length=64)(batch)
    assert set(out) == {"input_ids", "attention_mask", "token_type_ids", "targets"}
    assert out["input_ids"].shape == (2, 10)  # 8 words + [CLS] + [SEP]
    assert out["attention_mask"].sum(1).tolist() == [5, 10]
    assert (out["input_ids"][0, 5:] == tokenizer.pad_token_id).all()
    assert tokenizer.convert_ids_to_tokens(out["input_ids"][0, :5].tolist()) == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    assert out["targets"].dtype == torch.int64 and out["targets"].tolist() == [1, 0]


def test_collator_truncates_and_fixed_length_mode(tokenizer):
    targets = np.array([[0.5, 1.0], [2.0, 3.0]], dtype=np.float32)
    batch = [("the cat sat " * 10, targets[0]), ("a dog", targets[1])]
    dynamic = TextCollator(tokenizer, max_length=12)(batch)
    assert dynamic["input_ids"].shape == (2, 12) and dynamic["input_ids"][0, -1] == tokenizer.sep_token_id
    fixed = TextCollator(tokenizer, max_length=16, padding="max_length")([("a dog", None)])
    assert fixed["input_ids"].shape == (1, 16) and fixed["attention_mask"].sum() == 4
    assert "targets" not in fixed
    assert dynamic["targets"].dtype == torch.float32 and dynamic["targets"].shape == (2, 2)


def test_collator_rejects_unknown_padding(tokenizer):
    with pytest.raises(PoolkitError, match="unknown padding 'dynamic'"):
        TextCollator(tokenizer, padding="dynamic")


def test_make_loader_inference_round_trip(tokenizer):
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 20))) for _ in range(37)]
    names = [str(i) for i in range(37)]
    data = TableData(texts, np.arange(37, dtype=np.int64), "classification", names, ("label",), "text", "test")
    loader = make_loader(data, tokenizer, batch_size=8, train=False)
    targets, widths = [], []
    for batch in loader:
        targets.append(batch["targets"])
        widths.append(batch["input_ids"].shape[1])
    assert widths == sorted(widths, reverse=True)  # longest batch first, each padded only to its own longest
    assert loader.batch_sampler.restore(torch.cat(targets)).tolist() == list(range(37))
    assert len(TextDataset(texts)) == 37 and TextDataset(texts)[3] == (texts[3], None)
