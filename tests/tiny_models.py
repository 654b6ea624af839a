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


def tiny_decoder_dir(folder: Path, kind: str = "gpt2", seed: int = 0, padding_side: str = "right") -> str:
    """Save a tiny random decoder (``gpt2`` or ``llama``: hidden 32, 2 layers) and a word-level tokenizer with an
    EOS and no pad token (as GPT-2's and Llama's own), built with ``tokenizers``; returns the path."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2Model, LlamaConfig, LlamaModel, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(["<unk>", "<eos>", *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>",
                                        padding_side=padding_side, model_max_length=64)
    torch.manual_seed(seed)
    if kind == "gpt2":
        model = GPT2Model(GPT2Config(vocab_size=len(vocab), n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                     eos_token_id=1, bos_token_id=1))
    else:
        model = LlamaModel(LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                       max_position_embeddings=64, eos_token_id=1, bos_token_id=1, pad_token_id=None))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
