"""Embed texts with a graph written by ``poolkit export-onnx``, using only numpy, onnxruntime and tokenizers (no
torch, no poolkit, no transformers): ``python examples/serve_onnx.py DIR [--int8] [--out vectors.npy] TEXT ...``.

The folder's ``poolkit-onnx.json`` says how to tokenise: the prompt to put first, the maximum length, the padding id
(padding on the right) and whether an EOS ends every text (decoder embedders pooled at their last token); its
``session`` entry, the onnxruntime graph optimisations to leave out (slower than the ops they fuse on the CPU
measured) and the session settings to make (threads that wait for work without spinning; docs/onnx.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnxruntime
from tokenizers import Tokenizer


def embed(folder: str | Path, texts: list[str], int8: bool = False) -> np.ndarray:
    """(len(texts), dim) float32: the exported embedder's vectors of ``texts``."""
    folder = Path(folder)
    manifest = json.loads((folder / "poolkit-onnx.json").read_text())
    how = manifest["tokenizer"]
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(how["max_length"] - (1 if how["append_eos"] else 0))
    encodings = tokenizer.encode_batch([how["prompt"] + text for text in texts])
    rows = {"input_ids": [e.ids for e in encodings], "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings]}
    if how["append_eos"]:
        rows = {"input_ids": [ids + [how["eos_token_id"]] for ids in rows["input_ids"]],
                "attention_mask": [mask + [1] for mask in rows["attention_mask"]],
                "token_type_ids": [types + types[-1:] for types in rows["token_type_ids"]]}
    length = max(len(ids) for ids in rows["input_ids"])
    pads = {"input_ids": how["pad_token_id"], "attention_mask": 0, "token_type_ids": 0}
    feeds = {name: np.array([row + [pads[name]] * (length - len(row)) for row in rows[name]], dtype=np.int64)
             for name in manifest["inputs"]}
    # the onnxruntime optimisations to leave out and settings to make (none in folders exported before the manifest
    # recorded them)
    session_choices = manifest.get("session", {})
    options = onnxruntime.SessionOptions()
    for key, value in session_choices.get("config", {}).items():
        options.add_session_config_entry(key, value)
    session = onnxruntime.InferenceSession(str(folder / ("model-int8.onnx" if int8 else "model.onnx")), options,
                                           providers=["CPUExecutionProvider"],
                                           disabled_optimizers=session_choices.get("disabled_optimizers", []))
    return session.run([manifest["output"]], feeds)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("texts", nargs="+")
    parser.add_argument("--int8", action="store_true", help="run model-int8.onnx")
    parser.add_argument("--out", help="write the vectors to this .npy file (default: print them)")
    args = parser.parse_args()
    vectors = embed(args.folder, args.texts, args.int8)
    if args.out:
        np.save(args.out, vectors)
    else:
        print(vectors)


if __name__ == "__main__":
    main()
