"""A tiny random-init BERT and a word-level tokenizer, saved to a folder: no downloads in tests."""

from __future__ import annotations

from pathlib import Path

from transformers import BertConfig, BertModel, BertTokenizerFast

WORDS = ("the a cat dog sat on mat ran fast slow big small red blue green one two three good bad "
         "very not is was and or".split())


def tiny_bert_dir(folder: Path, num_layers: int = 2, hidden: int = 32, seed: int = 0, pieces: tuple[str, ...] = ()) -> str:
    """Save a tiny BERT (hidden 32, 2 layers) and its tokenizer to ``folder``; returns the path. ``pieces``: extra
    vocabulary entries (e.g. "##s", so that "cats" is split into two pieces)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *pieces]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers 5 ignores BertTokenizerFast(vocab_file=...); loading the folder reads vocab.txt.
    tokenizer = BertTokenizerFast.from_pretrained(folder)
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=num_layers,
                        num_attention_heads=2, intermediate_size=37, max_position_embeddings=64)
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
