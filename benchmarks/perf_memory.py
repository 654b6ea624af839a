"""Item 3: peak memory of layer pooling over 13 hidden states (B = 32, T = 512, D = 768), measured.

Target: at most 10% over the hidden states themselves (the stacking snippet doubles them).

Every variant runs in a fresh Python process, so nothing one leaves behind (allocator caches, lazily
initialised kernels) counts for another. The child makes the 13 fp32 hidden states, warms the variant up
on a tiny input (lazy initialisation is not the pooler's memory), then measures one call:

* CPU: the process's resident-set high-water mark. After the hidden states are in place the kernel's
  ``VmHWM`` is reset (``echo 5 > /proc/self/clear_refs``; where that is not allowed, ``ru_maxrss`` is read
  before and after instead), and the figure is ``VmHWM`` after the call minus resident memory before it.
  glibc hands blocks this large back to the kernel when they are freed, so a transient stack shows up
  in the high-water mark and nowhere else.
* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus the memory
  allocated before the call.

Two modes: inference (``torch.inference_mode``) and a training forward (hidden states require grad,
autograd records what backward will need; the backward pass itself is left out: the hidden states'
gradients belong to the encoder whatever the pooler).

    .venv/bin/python benchmarks/perf_memory.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BATCH, LENGTH, DIM, NUM_LAYERS = 32, 512, 768, 12
TARGET = 0.10

VARIANTS = {
    "snippet: torch.stack + Weighted Layer Pooling, [:, 0]": "snippet_weighted",
    "poolkit weighted_layer + cls": "weighted_layer:cls",
    "poolkit weighted_layer + mean": "weighted_layer:mean",
    "poolkit weighted_layer + attention (mixes all positions)": "weighted_layer:attention",
    "snippet: torch.stack + LSTM Pooling": "snippet_lstm",
    "poolkit lstm_layers (cls)": "lstm_layers:cls",
    "poolkit concat_layers (last 4, cls)": "concat_layers:cls",
    "reference: poolkit attention on the last layer alone": "token:attention",
}


# -- child ------------------------------------------------------------------------------------------
def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def build(variant: str, device):
    import torch

    import snippets
    from poolkit import get_pooler

    torch.manual_seed(0)
    if variant == "snippet_weighted":
        module = snippets.WeightedLayerPooling(NUM_LAYERS, layer_start=4).to(device)
        return module, lambda states, mask: snippets.weighted_layer_cls(module, states)
    if variant == "snippet_lstm":
        module = snippets.LSTMPooling(NUM_LAYERS, DIM, 256).to(device)
        return module, lambda states, mask: snippets.lstm_over_layers(module, states)
    name, token = variant.split(":")
    if name == "token":  # a token pooler on the last hidden state: its own working memory, for reference
        pooler = get_pooler(token, hidden_size=DIM).to(device)
        return pooler, lambda states, mask: pooler(states[-1], mask)
    pooler = get_pooler(name, hidden_size=DIM, num_layers=NUM_LAYERS, token_pooler=token).to(device)
    return pooler, lambda states, mask: pooler(states, mask)


def child(variant: str, mode: str, device_name: str) -> dict:
    import torch

    torch.set_num_threads(1)
    device = torch.device(device_name)
    module, call = build(variant, device)
    train = mode == "train"
    module.train(train)

    def run(states, mask):
        if train:
            return call(states, mask)
        with torch.inference_mode():
            return call(states, mask)

    tiny = tuple(torch.randn(2, 8, DIM, device=device, requires_grad=train) for _ in range(NUM_LAYERS + 1))
    run(tiny, torch.ones(2, 8, dtype=torch.long, device=device))  # lazy initialisation, not measured
    gen = torch.Generator().manual_seed(0)
    states = tuple(torch.randn(BATCH, LENGTH, DIM, generator=gen).to(device).requires_grad_(train)
                   for _ in range(NUM_LAYERS + 1))
    lengths = torch.randint(LENGTH // 2, LENGTH + 1, (BATCH,), generator=gen)
    mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).long().to(device)
    states_bytes = sum(h.numel() * h.element_size() for h in states)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = run(states, mask)
        torch.cuda.synchronize(device)
        added, method = torch.cuda.max_memory_allocated(device) - before, "torch.cuda.max_memory_allocated"
    else:
        before = _rss_bytes()
        if _reset_hwm():
            out = run(states, mask)
            added, method = _hwm_bytes() - before, "VmHWM after clear_refs"
        else:
            start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            out = run(states, mask)
            added, method = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - start, "ru_maxrss"
    del out
    return {"added_bytes": max(added, 0), "states_bytes": states_bytes, "method": method}


# -- parent -----------------------------------------------------------------------------------------
def render(result: dict) -> str:
    """The table of every variant's peak over the hidden states, then the target line (weighted_layer + cls)."""
    from perf_common import table, verdict

    rows, body = result["rows"], []
    for label in dict.fromkeys(r["variant"] for r in rows):
        cells = [label]
        for mode in ("infer", "train"):
            row = next(r for r in rows if r["variant"] == label and r["mode"] == mode)
            mark = "" if not row["poolkit"] else ("" if row["share"] <= TARGET else " *")
            cells.append(f"+{row['added_mb']:.0f} MiB ({100 * row['share']:.1f}%){mark}")
        body.append(cells)
    key = [r for r in rows if r["variant"] == "poolkit weighted_layer + cls"]
    return (table(["variant", "inference", "training forward"], body,
                  title=f"Peak memory over the hidden states ({rows[0]['states_mb']:.0f} MiB), measured by "
                        f"{rows[0]['method']} (* = poolkit over the 10% target)")
            + f"\n\ntarget (weighted_layer + cls adds <= 10%): {verdict(all(r['share'] <= TARGET for r in key))}")


def measure(variant: str, mode: str, device: str) -> dict:
    result = subprocess.run([sys.executable, __file__, "--child", variant, "--mode", mode, "--device", device],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{variant} ({mode}) failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    from perf_common import add_common_args, save_json

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="infer", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.mode, args.device)))
        return {}
    print(f"# Peak memory added by layer pooling, {NUM_LAYERS + 1} hidden states of {BATCH}x{LENGTH}x{DIM} fp32 "
          f"({args.device}); one fresh process per variant")
    rows = []
    for label, variant in VARIANTS.items():
        for mode in ("infer", "train"):
            m = measure(variant, mode, args.device)
            share = m["added_bytes"] / m["states_bytes"]
            rows.append({"variant": label, "mode": mode, "added_mb": m["added_bytes"] / 2**20,
                         "states_mb": m["states_bytes"] / 2**20, "share": share, "method": m["method"],
                         "poolkit": label.startswith("poolkit")})  # the reference row has no target
            print(f"  {label:60s} {mode:5s} +{rows[-1]['added_mb']:8.1f} MiB ({100 * share:6.1f}%)", flush=True)
    result = {"device": args.device, "rows": rows}
    print(render(result))
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
