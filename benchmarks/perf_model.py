"""Item 4: every token pooler's share of a forward pass of the packaged MiniLM (batch 32 x 128): <= 2%.

The packaged all-MiniLM-L6-v2 encodes a batch of 32 real texts (fortune cookies when Debian's fortunes
is installed, else the embedded WordNet glosses; several joined per row) truncated to 128 tokens, and
every registered token pooler pools the encoder's ``last_hidden_state`` with the batch's mask. Encoder
forward and pooler calls are interleaved repeats, all under ``torch.inference_mode``; with ``--train``
both sides run forward + backward instead (the encoder's parameters and the pooler's input requiring
grad). Share = pooler time / encoder time, median over repeats.

    .venv/bin/python benchmarks/perf_model.py [--train]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from perf_common import (describe, interleaved, median_ms, parse_and_setup, per_repeat, ratio, save_json,  # noqa: E402
                         table, timed_call, verdict)
from poolkit import get_pooler, list_poolers  # noqa: E402

BATCH, LENGTH, TARGET = 32, 128, 0.02


def real_texts(count: int) -> tuple[list[str], str]:
    """``count`` real texts from a built-in dataset (fortunes if installed, else the embedded glosses)."""
    from poolkit.data import load_builtin

    for name in ("fortunes", "embedded"):
        try:
            data = load_builtin(name, limit=count)
            return list(data.texts), f"builtin:{name}"
        except Exception:  # noqa: BLE001 - fortunes missing: fall back to the embedded set
            continue
    raise RuntimeError("no built-in dataset could be loaded")


def model_batch(device: torch.device):
    """The packaged encoder and one 32 x 128 batch of real text (rows of several texts joined)."""
    from poolkit.models.encoders import load_encoder, load_tokenizer

    tokenizer = load_tokenizer(None)
    encoder = load_encoder(None).to(device).eval()
    texts, source = real_texts(BATCH * 8)
    rows = [" ".join(texts[i::BATCH]) for i in range(BATCH)]
    batch = tokenizer(rows, truncation=True, max_length=LENGTH, padding="max_length", return_tensors="pt")
    # Rows end at different real lengths, as in a padded batch: cut row i to 64 + 2i tokens.
    lengths = torch.tensor([64 + 2 * i for i in range(BATCH)])
    keep = torch.arange(LENGTH)[None, :] < lengths[:, None]
    batch["attention_mask"] = batch["attention_mask"] * keep
    batch["input_ids"] = torch.where(keep, batch["input_ids"], tokenizer.pad_token_id)
    return encoder, {k: v.to(device) for k, v in batch.items()}, source


def render(*results: dict) -> str:
    """One table of every token pooler's share, a pair of columns per result (forward, forward + backward),
    then the target line of each."""
    names = [r["pooler"] for r in results[0]["rows"]]
    shares = [{r["pooler"]: r for r in result["rows"]} for result in results]
    headers = ["token pooler"] + [h for result in results for h in (f"share of the {result['mode']}", "pooler ms")]
    body = [[name] + [cell for rows in shares for cell in
                      (f"{100 * rows[name]['share']:.2f}%" + ("" if rows[name]["share"] <= TARGET else " *"),
                       f"{rows[name]['pooler_ms']:.2f}")] for name in names]
    encoders = "; ".join(f"{result['mode']}: {result['rows'][0]['encoder_ms']:.0f} ms" for result in results)
    verdicts = [f"target (every token pooler <= 2% of the {result['mode']}): "
                f"{verdict(all(r['share'] <= TARGET for r in result['rows']))}" for result in results]
    return "\n\n".join([table(headers, body, title=f"Pooler time / encoder time (encoder {encoders}; "
                                                    "* = over the 2% target)"), *verdicts])


def main(argv: list[str] | None = None) -> dict:
    args, device = parse_and_setup(__doc__, argv, lambda parser: parser.add_argument(
        "--train", action="store_true", help="forward + backward on both sides (default: inference)"))
    mode = "forward + backward" if args.train else "forward"
    repeats = args.repeats or (7 if args.full else 5)
    encoder, batch, source = model_batch(device)
    with torch.inference_mode():
        hidden = encoder(**batch).last_hidden_state
    mask = batch["attention_mask"]
    dim = hidden.shape[-1]
    names = list_poolers("token")
    torch.manual_seed(0)
    poolers = {n: get_pooler(n, hidden_size=dim).to(device).train(args.train) for n in names}
    print(f"# Token poolers' share of a MiniLM {mode} ({describe(device)}), batch {BATCH}x{LENGTH} of {source}, "
          f"{repeats} interleaved repeats")
    encoder.train(args.train)
    hidden = hidden.clone().requires_grad_(args.train)
    variants = {"encoder": timed_call(lambda: encoder(**batch).last_hidden_state, args.train,
                                      list(encoder.parameters()))}
    for name, pooler in poolers.items():
        variants[name] = timed_call(lambda p=pooler: p(hidden, mask), args.train, [hidden, *pooler.parameters()])
    times = interleaved(variants, device, repeats=repeats, min_sample_s=0.05)
    rows = [{"pooler": n, "share": ratio(times, n, "encoder"), "per_repeat": per_repeat(times, n, "encoder"),
             "pooler_ms": median_ms(times, n),
             "encoder_ms": median_ms(times, "encoder"), "mode": mode} for n in names]
    result = {"device": describe(device), "repeats": repeats, "source": source, "mode": mode, "rows": rows}
    print(render(result))
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
