"""The checkpoint's own pooling against sentence-transformers: folders built by sentence-transformers from the
packaged all-MiniLM-L6-v2 (each pooling mode, several at once, Dense layers, Normalize, a named prompt kept out of
the pool, Matryoshka truncation), each encoded by ``SentenceTransformer(folder).encode`` and by
``poolkit.encode(texts, model=folder)`` (its default, ``pooler="auto"``) on the texts of ``builtin:wordnet-examples``;
the largest difference per case goes to docs/embedders/parity.json (``scripts/docs.py --write embedders`` renders
docs/embedders.md from it).

    .venv/bin/python scripts/declared_parity.py      # about 2 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import torch

from poolkit.data.pairs import load_pairs
from poolkit.io import atomic_write_json
from poolkit.models.encoders import resolve_model
from poolkit.models.text_encoder import TextEncoder
from poolkit.provenance import run_provenance

OUT = Path(__file__).resolve().parent.parent / "docs" / "embedders" / "parity.json"
DATA = "builtin:wordnet-examples"
#: name -> (pooling modes, Dense output widths, Normalize, Pooling's include_prompt, a default prompt)
CASES = {
    "cls + Dense(256, tanh) + Normalize": ("cls", (256,), True, True, None),
    "max + Normalize": ("max", (), True, True, None),
    "lasttoken": ("lasttoken", (), False, True, None),
    "weightedmean + Normalize": ("weightedmean", (), True, True, None),
    "mean_sqrt_len_tokens": ("mean_sqrt_len_tokens", (), False, True, None),
    "cls, mean, max + Dense(384, tanh) + Dense(128, tanh)": (("cls", "mean", "max"), (384, 128), False, True, None),
    "mean + Normalize, prompt 'query: ' out of the pool": ("mean", (), True, False, "query: "),
}


def build(folder: Path, modes, dense: tuple[int, ...], normalize: bool, include_prompt: bool, prompt: str | None):
    """A sentence-transformers model of the packaged MiniLM with these modules, saved to ``folder`` and loaded."""
    from sentence_transformers import SentenceTransformer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers import models

    torch.manual_seed(0)
    word = models.Transformer(resolve_model(None), max_seq_length=256)
    modules = [word, models.Pooling(384, pooling_mode=modes, include_prompt=include_prompt)]
    width = modules[1].get_embedding_dimension()
    for out in dense:
        modules.append(models.Dense(width, out))
        width = out
    if normalize:
        modules.append(models.Normalize())
    prompts = {"prompts": {"query": prompt}, "default_prompt_name": "query"} if prompt else {}
    SentenceTransformer(modules=modules, device="cpu", **prompts).save(str(folder))
    return SentenceTransformer(str(folder), device="cpu")


def largest_gap(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours - theirs).abs().max())


def main(argv: list[str] | None = None) -> None:
    from sentence_transformers import SentenceTransformer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=500, help="texts of the built-in set to encode (default 500)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    pairs = load_pairs(DATA, "retrieval")
    texts = (list(pairs.queries) + list(pairs.corpus))[:args.texts]
    cases = []
    shipped = SentenceTransformer(resolve_model(None), device="cpu")
    encoder = TextEncoder()
    cases.append({"case": "the packaged all-MiniLM-L6-v2 as shipped (mean + Normalize)", "pooling": encoder.pooling,
                  "max_abs_diff": largest_gap(encoder.encode(texts), shipped.encode(texts, convert_to_tensor=True))})
    for dim in (64, 128):
        ours = TextEncoder(dim=dim, normalize=True).encode(texts)
        theirs = SentenceTransformer(resolve_model(None), device="cpu", truncate_dim=dim).encode(
            texts, convert_to_tensor=True, normalize_embeddings=True)
        cases.append({"case": f"Matryoshka: the first {dim} dimensions, normalised", "pooling": encoder.pooling,
                      "max_abs_diff": largest_gap(ours, theirs)})
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, spec) in enumerate(CASES.items()):
            folder = Path(tmp) / f"case{k}"
            model = build(folder, *spec)
            encoder = TextEncoder(str(folder))
            cases.append({"case": name, "pooling": encoder.pooling, "prompt": encoder.prompt,
                          "include_prompt": encoder.include_prompt,
                          "max_abs_diff": largest_gap(encoder.encode(texts), model.encode(texts,
                                                                                          convert_to_tensor=True))})
            print(f"{name}: {cases[-1]['max_abs_diff']:.2e}", flush=True)
    import sentence_transformers

    atomic_write_json(OUT, {"script": "scripts/declared_parity.py", "data": DATA, "texts": len(texts),
                            "sentence_transformers": sentence_transformers.__version__, "cases": cases,
                            "seconds": time.perf_counter() - started, "provenance": run_provenance()})
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
