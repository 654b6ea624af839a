"""Item 5: embedding throughput, poolkit vs sentence-transformers ``encode``: target >= 1.0x, aim 1.2x.

Same packaged all-MiniLM-L6-v2 weights, same real texts (fortune cookies when Debian's fortunes is
installed, else the embedded WordNet glosses), same batch size (32), same maximum length (the model's
256), same output (mean pooling + L2 normalisation). poolkit's side is its public ``TextEncoder``
(``poolkit.encode``): the texts tokenised once, batches of similar *token* length (longest first),
each padded to its own longest text, ``torch.inference_mode``, only ``last_hidden_state`` asked for,
the ``mean`` pooler, then the rows put back in input order.
sentence-transformers: ``SentenceTransformer(path).encode(texts, batch_size=32)`` (it sorts by character
length and tokenises batch by batch). The two alternate, whole runs over the texts, median of repeats; the
embeddings are checked to agree.

    .venv/bin/python benchmarks/perf_embed.py            # 320 texts
    .venv/bin/python benchmarks/perf_embed.py --full     # 2,000 texts
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch.nn import functional as F  # noqa: E402

from perf_common import (describe, interleaved, median_ms, parse_and_setup, per_repeat, ratio,  # noqa: E402
                         save_json, table, verdict)
from perf_model import real_texts  # noqa: E402
from poolkit import TextEncoder  # noqa: E402
from poolkit.models.encoders import resolve_model  # noqa: E402

BATCH, TARGET, AIM = 32, 1.0, 1.2


def render(result: dict) -> str:
    """Texts per second of both sides, the speed-up with every repeat's, and the target and aim."""
    speedup, texts = result["speedup"], result["texts"]
    rows = [["sentence-transformers encode", f"{texts / (result['st_ms'] / 1e3):.0f}", "1.00x"],
            ["poolkit (length-sorted, inference mode, last layer only)",
             f"{texts / (result['poolkit_ms'] / 1e3):.0f}", f"{speedup:.2f}x"]]
    return "\n\n".join([
        table(["encoder", "texts / s", "throughput vs sentence-transformers"], rows,
              title=f"Embedding throughput (lowest cosine between the two outputs: {result['agreement']:.6f})"),
        "texts/s from each variant's median time; the ratio is the median of the per-repeat ratios: "
        + ", ".join(f"{r:.2f}" for r in result["per_repeat"]),
        f"target (>= {TARGET:g}x): {verdict(speedup >= TARGET)}; aim ({AIM:g}x): {verdict(speedup >= AIM)}"])


def main(argv: list[str] | None = None) -> dict:
    args, device = parse_and_setup(__doc__, argv, lambda parser: parser.add_argument(
        "--texts", type=int, default=None, help="number of texts (default 320, 2000 with --full)"))
    repeats = args.repeats or 5
    texts, source = real_texts(args.texts or (2000 if args.full else 320))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sentence_transformers import SentenceTransformer
        st_model = SentenceTransformer(resolve_model(None), device=str(device))
    ours = TextEncoder(None, "mean", normalize=True, max_length=st_model.max_seq_length, device=device)
    lengths = [len(ids) for ids in ours.tokenizer(texts, truncation=True, max_length=ours.max_length)["input_ids"]]
    print(f"# Embedding throughput ({describe(device)}): {len(texts)} texts of {source} "
          f"(tokens: mean {sum(lengths) / len(lengths):.0f}, max {max(lengths)}), batch {BATCH}, "
          f"{repeats} interleaved repeats")

    def st_encode():
        return st_model.encode(texts, batch_size=BATCH, convert_to_tensor=True, show_progress_bar=False).cpu()

    agreement = F.cosine_similarity(ours.encode(texts), st_encode().float(), dim=-1).min().item()
    # The agreement check above was both variants' warm-up.
    times = interleaved({"sentence-transformers encode": st_encode, "poolkit": lambda: ours.encode(texts)},
                        device, repeats=repeats, min_sample_s=0.0, warmup=0)
    result = {"device": describe(device), "repeats": repeats, "texts": len(texts), "source": source,
              "speedup": ratio(times, "sentence-transformers encode", "poolkit"), "agreement": agreement,
              "st_ms": median_ms(times, "sentence-transformers encode"), "poolkit_ms": median_ms(times, "poolkit"),
              "per_repeat": per_repeat(times, "sentence-transformers encode", "poolkit")}
    print(render(result))
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
