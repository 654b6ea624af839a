"""Item 8: embedding at ONNX Runtime speed (issue 29): poolkit's ``onnx`` / ``onnx-int8`` backends against
sentence-transformers' torch ``encode``, and what the int8 weights cost.

Same packaged all-MiniLM-L6-v2, same real texts as item 5 (fortune cookies when Debian's fortunes is installed),
batch 32, the model's own pooling (mean + Normalize). Measured in one run:

1. **Throughput** at 1 thread and at torch's default thread count: sentence-transformers ``encode`` (torch), its
   ``backend="onnx"`` where it loads here (the reason when it does not), its ``backend="openvino"`` from an
   environment of its own (``make st-openvino``; :class:`PeerWorker`), twice: as users get it and held to float32,
   and poolkit's ``TextEncoder`` with
   ``backend`` torch, onnx and onnx-int8; whole passes over the texts, the variants interleaved, median of repeats,
   the ratio per repeat. Targets: onnx >= 2x, onnx-int8 >= 3x sentence-transformers' torch ``encode``. Beside them
   each backend's floor: the encoder's linear layers alone in onnxruntime (float32, and int8 with the shipped
   recipe) on the same batches' rows, which every pass of that backend computes and more.
2. **Cost**: each backend's peak RSS (a fresh process that loads the model, for onnx from the cache, and embeds
   the texts once) and the export time of the float32 graph and of its int8 copy.
3. **Agreement**: onnx vs torch max |diff| over the texts for mean, cls, attention (random weights: the numerics of
   the learned scorer, not a trained one) and weighted_layer (target <= 1e-4).
4. **The traced attention**: the graph traced on the encoder's eager attention (what poolkit exports) against the
   one traced on the model's own (torch's scaled-dot-product attention), float32 and int8, passes interleaved.
5. **Where a pass's time goes**: onnxruntime's own profile of passes over the texts, float32 and int8 graphs, at
   torch's default thread count: kernel time per op type, and whether the ops other than the products by a weight
   (the attention's own products among them) fit in what each target leaves beyond its floor (if not, the graph
   misses the target even with its products by a weight at the floor).
6. **onnxruntime's fusions**: the sessions poolkit runs (``onnx_graph.DISABLED_OPTIMIZERS`` left out) against
   onnxruntime's default optimisations, float32 and int8 graphs, at 1 thread and the default, passes interleaved.
7. **onnxscript's transformer fusions**: the float32 graph as shipped against onnxscript's ``optimize_for_ort``
   rewrite of it (one Attention op per layer with packed query, key and value weights, SkipLayerNormalization,
   BiasGelu), and the shipped int8 copy against the rewrite's, at 1 thread and the default, passes interleaved.
8. **onnxruntime's spinning threads**: its intra-op threads spinning while they wait for work (its default)
   against waiting without spinning, float32 and int8 graphs, at 1 thread and the default, passes interleaved; run
   quiet and beside busy processes (``--background``).
9. **The int8 choice**: per-channel vs per-tensor scales x MatMul weights only vs MatMul + the embedding Gather:
   mean / lowest cosine to the float32 vectors over the throughput texts, nDCG@10 on builtin:wordnet-examples
   (queries ranked against the whole corpus, as ``poolkit evaluate``), time per pass, file size. The rule chooses on
   the cosine, size and time only; nDCG@10 is the held-out check. Target for the shipped choice
   (poolkit.models.onnx_graph.INT8): mean cosine >= 0.98, nDCG@10 within 0.01 of float32.

    .venv/bin/python benchmarks/perf_onnx.py --threads 0 --repeats 3 --json benchmarks/results/onnx.json

(throughput, fusions, rewrites and spinning at 1 thread and at torch's default thread count whatever ``--threads``
says; the rest at the default. Every part runs poolkit's sessions as they are at the time: since b18339f their
threads wait without spinning, ``onnx_graph.SESSION_CONFIG``, which a result records as ``session_config``)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import ExitStack
from functools import partial
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from perf_common import (Worker, every_repeat, interleaved, median_ms, parse_and_setup, per_repeat, ratio,  # noqa: E402
                         save_json, table, verdict)
from perf_model import real_texts  # noqa: E402
from poolkit import TextEncoder  # noqa: E402
from poolkit.models import onnx_graph  # noqa: E402
from poolkit.models.encoders import resolve_model  # noqa: E402
from poolkit.provenance import run_provenance  # noqa: E402

BATCH = 32
TARGETS = {"onnx": 2.0, "onnx-int8": 3.0}
PARITY_TARGET, COSINE_TARGET, NDCG_TARGET = 1e-4, 0.98, 0.01
AGREEMENT_POOLERS = ("mean", "cls", "attention", "weighted_layer")
INT8_GRID = [{"per_channel": channel, "op_types": ops, "weight_type": "QInt8"}
             for channel in (True, False) for ops in (["MatMul"], ["MatMul", "Gather"])]
RETRIEVAL = "builtin:wordnet-examples"
#: torch's own thread count, read before ``--threads`` changes it: the default users run with
DEFAULT_THREADS = torch.get_num_threads()
ST = "sentence-transformers encode"
ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "st_peer_worker.py"
#: sentence-transformers' own backends that do not install beside poolkit's dev environment (their extras' pins
#: conflict with it), each run by :data:`WORKER` from an environment of its own: the variant's name -> (the backend,
#: that environment's python, the command that makes it, the worker's ``--precision``). OpenVINO twice: as users get
#: it (bf16 on CPUs with native bf16) and held to float32, the precision of every other row.
OPENVINO_PYTHON = ROOT / ".venv" / "st-openvino" / "bin" / "python"
PEERS = {"sentence-transformers backend='openvino'": ("openvino", OPENVINO_PYTHON, "make st-openvino", "default"),
         "sentence-transformers backend='openvino', float32": ("openvino", OPENVINO_PYTHON, "make st-openvino", "f32")}
#: How a profile's op type ends for a product by a weight (a linear layer's: the work the floors hold).
WEIGHTS = " (weights)"
FLOORS = {"onnx": "floor: the linear layers alone, onnxruntime float32",
          "onnx-int8": "floor: the linear layers alone, onnxruntime int8"}


def _encoder(backend: str, **options) -> TextEncoder:
    return TextEncoder(None, backend=backend, device="cpu", **options)


def linear_layers_graph(config, path: Path) -> None:
    """An ONNX graph of the encoder's linear layers alone, same shapes (per layer: query, key, value and output
    hidden x hidden, then hidden x intermediate and back), chained one into the next on the (tokens, hidden) rows:
    every weight matmul of a pass, nothing else (no bias, attention scores, softmax, norms, GELU). Random weights
    (the time of a matmul does not depend on them)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    hidden, inner = config.hidden_size, config.intermediate_size
    rng = np.random.default_rng(0)
    shapes = [(hidden, hidden)] * 4 + [(hidden, inner), (inner, hidden)]
    weights, nodes, last = [], [], "x"
    for layer in range(config.num_hidden_layers):
        for i, shape in enumerate(shapes):
            name = f"w{layer}_{i}"
            weights.append(numpy_helper.from_array(
                (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name))
            nodes.append(helper.make_node("MatMul", [last, name], [f"y{layer}_{i}"]))
            last = f"y{layer}_{i}"
    graph = helper.make_graph(nodes, "linear_layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                     ["rows", hidden])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, ["rows", hidden])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def floor_variants(texts: list[str], scratch: Path) -> dict:
    """The throughput floors: per backend, a pass of the encoder's linear layers alone (:func:`linear_layers_graph`;
    the int8 one quantised with the shipped recipe) in onnxruntime over the texts' own batches (the rows of each
    length-sorted batch of :data:`BATCH`, padding included, made before timing: no tokenising either). Every onnx
    pass does this work and more, so no pass of that backend can be faster."""
    from poolkit.data.batching import sorted_token_batches

    encoder = _encoder("torch")
    config = encoder.encoder.config
    _, batches = sorted_token_batches(encoder.tokenizer, texts, encoder.max_length, BATCH)
    rows = [np.random.default_rng(0).standard_normal((batch["input_ids"].numel(), config.hidden_size))
            .astype(np.float32) for _, batch in batches]
    linear = scratch / "linear.onnx"
    linear_layers_graph(config, linear)
    onnx_graph.quantize_graph(linear, scratch / "linear-int8.onnx")
    variants = {}
    for backend, file in (("onnx", "linear.onnx"), ("onnx-int8", "linear-int8.onnx")):
        session = onnx_graph.OnnxSession(scratch, file=file).session
        variants[FLOORS[backend]] = lambda session=session: [session.run(None, {"x": x}) for x in rows]
    return variants


class PeerWorker(Worker):
    """:data:`WORKER` run by ``python`` (an environment of its own) on ``texts_file`` with ``model`` (default: the
    packaged one) as a :class:`Worker`; ``versions`` and ``computes_in`` from its ready line."""

    def __init__(self, python: Path, backend: str, threads: int, texts_file: Path, model: str | None = None,
                 timeout: float = 900.0, precision: str = "default") -> None:
        super().__init__([str(python), str(WORKER), "--model", model or resolve_model(None), "--backend", backend,
                          "--threads", str(threads), "--texts", str(texts_file), "--batch", str(BATCH),
                          "--precision", precision], timeout)
        self.versions, self.computes_in = self.ready["versions"], self.ready["precision"]


def start_peers(texts_file: Path, threads: int, stack: ExitStack) -> tuple[dict, dict[str, str]]:
    """A :class:`PeerWorker` per entry of :data:`PEERS` whose environment is built and starts (closed by ``stack``);
    -> (name -> worker, name -> why it does not run here)."""
    workers, not_run = {}, {}
    for name, (backend, python, make, precision) in PEERS.items():
        if not (python.parent.parent / ".installed").exists():  # what `make st-openvino` writes last
            not_run[name] = f"its environment ({python.parent.parent.relative_to(ROOT)}) is missing: `{make}`"
            continue
        try:
            workers[name] = PeerWorker(python, backend, threads, texts_file, precision=precision)
        except Exception as err:  # noqa: BLE001 - the peer's own failure: said in the table's note
            not_run[name] = f"{type(err).__name__}: {err}"
            continue
        stack.callback(workers[name].close)
    return workers, not_run


def peer_agreement(workers: dict[str, PeerWorker], times: dict[str, list[float]], reference: np.ndarray,
                   path: Path) -> tuple[dict, dict[str, str]]:
    """-> (name -> the peer's versions and largest difference to ``reference``, name -> why it failed) for the
    timed ``workers``; a peer that failed during the timed passes, or while giving its vectors (saved to ``path``),
    has its times taken out of ``times``: a pass that did not run is no time to report."""
    peers, failed = {}, {}
    for name, worker in workers.items():
        if worker.failure is None:
            try:
                vectors = worker.vectors(path)
            except RuntimeError as err:
                worker.failure = f"failed giving its vectors: {err}"
        if worker.failure is not None:
            failed[name] = worker.failure
            del times[name]
            continue
        peers[name] = {"versions": worker.versions, "computes_in": worker.computes_in,
                       "max_abs_diff_to_st_torch": float(np.abs(vectors - reference).max())}
    return peers, failed


def throughput(texts: list[str], threads: int, repeats: int) -> dict:
    """Every variant's seconds per pass over ``texts`` at ``threads`` threads, interleaved; each peer of
    :data:`PEERS`' largest difference to sentence-transformers' torch ``encode``."""
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    path = resolve_model(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        st_model = SentenceTransformer(path, device="cpu")
    encode = partial(st_model.encode, texts, batch_size=BATCH, show_progress_bar=False)
    variants, not_run = {ST: encode}, {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnx_model = SentenceTransformer(path, device="cpu", backend="onnx")
        variants["sentence-transformers backend='onnx'"] = lambda: onnx_model.encode(
            texts, batch_size=BATCH, show_progress_bar=False)
    except Exception as err:  # noqa: BLE001 - optimum missing, or no ONNX file in the folder: say why
        not_run["sentence-transformers backend='onnx'"] = (
            f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}")
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        texts_file = Path(scratch) / "texts.json"
        texts_file.write_text(json.dumps(texts))
        workers, missing = start_peers(texts_file, threads, stack)
        variants |= workers
        not_run |= missing
        for backend in ("torch", "onnx", "onnx-int8"):
            encoder = _encoder(backend)  # after set_num_threads: the sessions take the thread count
            variants[f"poolkit {backend}"] = lambda encoder=encoder: encoder.encode(texts, batch_size=BATCH)
        variants.update(floor_variants(texts, Path(scratch)))
        times = interleaved(variants, torch.device("cpu"), repeats=repeats, min_sample_s=0.0, warmup=1)
        peers, failed = peer_agreement(workers, times, encode(), Path(scratch) / "peer.npy")
        not_run |= failed
    rows = {name: {"ms": median_ms(times, name), "texts_per_s": len(texts) / (median_ms(times, name) / 1e3),
                   "vs_st": ratio(times, ST, name), "vs_st_per_repeat": per_repeat(times, ST, name)}
            for name in times}
    return {"threads": threads, "variants": rows, "unavailable": not_run, "peers": peers}


def peak_rss(backend: str, texts_count: int) -> float:
    """MiB of peak resident memory of a fresh process that loads the model with ``backend`` and embeds the texts
    (VmHWM: getrusage's ru_maxrss would carry this process's peak across the exec)."""
    code = ("import sys; sys.path.insert(0, %r); from perf_model import real_texts; "
            "from poolkit import TextEncoder; texts, _ = real_texts(%d); "
            "TextEncoder(None, backend=%r, device='cpu').encode(texts, batch_size=%d); "
            "print(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"
            % (str(Path(__file__).resolve().parent), texts_count, backend, BATCH))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600)
    return int(done.stdout.strip().splitlines()[-1]) / 1024


def agreement(texts: list[str]) -> list[dict]:
    """onnx vs torch, max |diff| and lowest cosine over the texts, per pooler (a fresh export each)."""
    rows = []
    for name in AGREEMENT_POOLERS:
        torch.manual_seed(0)
        reference = TextEncoder(None, name, allow_untrained=True, device="cpu")
        onnx = TextEncoder(None, reference.pooler, backend="onnx", device="cpu")
        a, b = onnx.encode(texts, batch_size=BATCH), reference.encode(texts, batch_size=BATCH)
        rows.append({"pooler": name, "max_abs_diff": float((a - b).abs().max()),
                     "lowest_cosine": float(torch.nn.functional.cosine_similarity(a, b).min())})
    return rows


def retrieval_metrics(encode) -> float:
    """nDCG@10 of ``encode`` (texts -> vectors) on the built-in retrieval set, as ``poolkit evaluate`` scores it."""
    from poolkit.data.pairs import load_pairs
    from poolkit.training.contrastive import PairLayout, unit_metrics

    pairs = load_pairs(RETRIEVAL, "retrieval")
    layout = PairLayout.of(pairs)
    vectors = encode(list(layout.texts)).float()
    return unit_metrics(layout, np.arange(len(pairs)), lambda rows: vectors[torch.from_numpy(rows)])["ndcg@10"]


def sorted_encode(encoder: TextEncoder, session, texts: list[str]) -> torch.Tensor:
    """``texts`` ' vectors from ``session`` (a batch dict -> vectors) in the encoder's length-sorted batches."""
    from poolkit.data.batching import sorted_token_batches

    sampler, batches = sorted_token_batches(encoder.tokenizer, texts, encoder.max_length, BATCH)
    return sampler.restore(torch.cat([session(batch) for _, batch in batches]))


def int8_grid(texts: list[str], repeats: int) -> dict:
    """Every int8 recipe of :data:`INT8_GRID` against the float32 graph: agreement, nDCG@10, time, size."""
    encoder = _encoder("onnx")
    folder = onnx_graph.cached_graph(encoder, encoder.prompt).folder
    reference = encoder.encode(texts, batch_size=BATCH)

    def runner(session):
        return lambda some: sorted_encode(encoder, session, some)

    float_session = onnx_graph.OnnxSession(folder)
    result = {"float32": {"ndcg@10": retrieval_metrics(runner(float_session)),
                          "mib": (folder / onnx_graph.FLOAT_FILE).stat().st_size / 2**20}, "cells": []}
    with tempfile.TemporaryDirectory() as scratch:
        for how in INT8_GRID:
            target = Path(scratch) / f"int8-{len(result['cells'])}.onnx"
            started = time.perf_counter()
            onnx_graph.quantize_graph(folder / onnx_graph.FLOAT_FILE, target, how)
            seconds = time.perf_counter() - started
            encode = runner(onnx_graph.OnnxSession(target.parent, file=target.name))
            vectors = encode(texts)
            cosine = torch.nn.functional.cosine_similarity(vectors, reference)
            passes = []
            for _ in range(repeats):
                started_pass = time.perf_counter()
                encode(texts)
                passes.append(time.perf_counter() - started_pass)
            result["cells"].append({**how, "quantize_s": seconds, "mib": target.stat().st_size / 2**20,
                                    "mean_cosine": float(cosine.mean()), "lowest_cosine": float(cosine.min()),
                                    "ndcg@10": retrieval_metrics(encode), "ms": float(np.median(passes)) * 1e3,
                                    "shipped": how == onnx_graph.INT8})
    return result


def traced_attention(texts: list[str], repeats: int) -> dict:
    """The attention the encoder is traced with (poolkit.models.onnx_graph.TRACE_ATTENTION) against the model's own:
    both graphs and their int8 copies, whole passes over ``texts``, interleaved; the ratio per repeat (own / traced)."""
    encoder = _encoder("torch")
    own = encoder.encoder.config._attn_implementation
    variants = {}
    with tempfile.TemporaryDirectory() as scratch:
        for attention in (onnx_graph.TRACE_ATTENTION, None):
            folder = Path(scratch) / str(attention)
            folder.mkdir()
            onnx_graph.export_graph(encoder, folder, attention=attention, int8=True)
            for int8 in (False, True):
                session = onnx_graph.OnnxSession(folder, int8=int8)
                variants[(attention or own, int8)] = lambda session=session: sorted_encode(encoder, session, texts)
        times = interleaved({f"{a} {i}": fn for (a, i), fn in variants.items()}, torch.device("cpu"),
                            repeats=repeats, min_sample_s=0.0, warmup=1)
    traced = onnx_graph.TRACE_ATTENTION
    return {"traced": traced, "own": own, "rows": [
        {"int8": int8, "traced_ms": median_ms(times, f"{traced} {int8}"), "own_ms": median_ms(times, f"{own} {int8}"),
         "speedup": ratio(times, f"{own} {int8}", f"{traced} {int8}"),
         "per_repeat": per_repeat(times, f"{own} {int8}", f"{traced} {int8}")} for int8 in (False, True)]}


def op_profile(texts: list[str], passes: int = 3) -> dict:
    """Where a pass's time goes inside onnxruntime: its own profile (``enable_profiling``) of ``passes`` passes over
    the texts' length-sorted batches, the first included, at torch's thread count, per graph (float32, int8), the
    session as poolkit makes it: ms per pass of each op type's kernels, summed over their nodes; the products by a
    weight (the linear layers: the floors' work) apart, their op type ending in :data:`WEIGHTS`."""
    import onnxruntime

    encoder = _encoder("onnx")
    folder = onnx_graph.cached_graph(encoder, encoder.prompt, int8=True).folder
    graphs = {}
    with tempfile.TemporaryDirectory() as scratch:
        for graph, file in (("float32", onnx_graph.FLOAT_FILE), ("int8", onnx_graph.INT8_FILE)):
            options = onnxruntime.SessionOptions()
            options.enable_profiling = True
            options.profile_file_prefix = str(Path(scratch) / graph)
            session = onnx_graph.OnnxSession(folder, file=file, options=options)  # as poolkit runs it
            for _ in range(passes):
                sorted_encode(encoder, session, texts)
            events = json.loads(Path(session.session.end_profiling()).read_text())
            per_op: dict[str, float] = {}
            for event in events:
                if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                    op = event["args"]["op_name"]
                    # a product with one activation of rank 3 or more: its other operand is a weight, an initializer
                    # (not listed); the attention's products list two rank-4 activations
                    activations = sum(len(next(iter(shape.values()))) >= 3
                                      for shape in event["args"].get("input_type_shape", []))
                    op += WEIGHTS if is_product(op) and activations == 1 else ""
                    per_op[op] = per_op.get(op, 0.0) + event["dur"] / 1e3 / passes
            graphs[graph] = dict(sorted(per_op.items(), key=lambda item: -item[1]))
    return {"threads": torch.get_num_threads(), "passes": passes, "ms_per_pass": graphs}


def paired_passes(encoder: TextEncoder, texts: list[str], repeats: int, pairs, names: tuple[str, str]) -> list[dict]:
    """Whole passes over ``texts`` of two sessions per graph, interleaved, at 1 thread and at torch's default:
    ``pairs()`` (called once the thread count is set: sessions take it when made) -> {graph: (session named
    ``names[0]``, session named ``names[1]``)}. -> a row per graph and thread count: each one's median ms per pass
    (``<name>_ms``), the ratio first / second (``speedup``, over 1 where the second is faster) and per repeat, and
    how far their vectors are."""
    first, second = names
    rows = []
    for threads in sorted({1, DEFAULT_THREADS}):
        torch.set_num_threads(threads)  # before the sessions: they take torch's thread count
        variants, vectors = {}, {}
        for graph, sessions in pairs().items():
            for name, session in zip(names, sessions):
                variants[f"{graph} {name}"] = lambda session=session: sorted_encode(encoder, session, texts)
                vectors[f"{graph} {name}"] = variants[f"{graph} {name}"]()
        times = interleaved(variants, torch.device("cpu"), repeats=repeats, min_sample_s=0.0, warmup=1)
        graphs = dict.fromkeys(key.rsplit(" ", 1)[0] for key in variants)
        rows += [{"threads": threads, "graph": graph, f"{first}_ms": median_ms(times, f"{graph} {first}"),
                  f"{second}_ms": median_ms(times, f"{graph} {second}"),
                  "speedup": ratio(times, f"{graph} {first}", f"{graph} {second}"),
                  "per_repeat": per_repeat(times, f"{graph} {first}", f"{graph} {second}"),
                  "max_abs_diff": float((vectors[f"{graph} {first}"] - vectors[f"{graph} {second}"]).abs().max())}
                 for graph in graphs]
    torch.set_num_threads(DEFAULT_THREADS)
    return rows


def fusions(texts: list[str], repeats: int) -> dict:
    """The onnxruntime graph optimisations poolkit's sessions leave out (``onnx_graph.DISABLED_OPTIMIZERS``) against
    onnxruntime's defaults: the float32 and int8 graphs (:func:`paired_passes`: the ratio defaults / poolkit's)."""
    encoder = _encoder("onnx")
    folder = onnx_graph.cached_graph(encoder, encoder.prompt, int8=True).folder

    def pairs() -> dict:
        return {graph: tuple(onnx_graph.OnnxSession(folder, int8=graph == "int8", disabled_optimizers=left_out)
                             for left_out in ((), onnx_graph.DISABLED_OPTIMIZERS)) for graph in ("float32", "int8")}
    return {"left_out": list(onnx_graph.DISABLED_OPTIMIZERS),
            "rows": paired_passes(encoder, texts, repeats, pairs, ("defaults", "poolkit"))}


def rewrites(texts: list[str], repeats: int) -> dict:
    """onnxscript's transformer fusions for onnxruntime (``onnxscript.rewriter.ort_fusions.optimize_for_ort``: per
    layer one Attention op with the query, key and value weights packed into one product, SkipLayerNormalization,
    BiasGelu) applied to the float32 graph poolkit ships, against that graph: float32, and int8 (the rewritten graph
    quantised with the shipped recipe, its Attention ops asked for too (onnxruntime's quantiser left them float32 in
    every run so far: the op types recorded say), against the shipped int8 copy), both in poolkit's sessions
    (:func:`paired_passes`: the ratio shipped / rewritten, over 1 where the rewrite is faster); the fusions it made
    and the op types of the rewrite's int8 copy."""
    from collections import Counter

    import onnx
    import onnx_ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    encoder = _encoder("onnx")
    folder = onnx_graph.cached_graph(encoder, encoder.prompt, int8=True).folder
    with tempfile.TemporaryDirectory() as scratch:
        rewritten = Path(scratch) / onnx_graph.FLOAT_FILE
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, made = optimize_for_ort(onnx_ir.load(str(folder / onnx_graph.FLOAT_FILE)))
        onnx_ir.save(model, str(rewritten))
        int8 = {**onnx_graph.INT8, "op_types": [*onnx_graph.INT8["op_types"], "Attention"]}
        onnx_graph.quantize_graph(rewritten, rewritten.with_name(onnx_graph.INT8_FILE), int8)
        ops = Counter(node.op_type for node in onnx.load(str(rewritten.with_name(onnx_graph.INT8_FILE))).graph.node)

        def pairs() -> dict:
            return {graph: tuple(onnx_graph.OnnxSession(where, int8=graph == "int8")
                                 for where in (folder, rewritten.parent)) for graph in ("float32", "int8")}
        rows = paired_passes(encoder, texts, repeats, pairs, ("shipped", "rewritten"))
    return {"onnxscript": version("onnxscript"), "made": {name: count for name, count in made.items() if count},
            "int8_recipe": int8, "int8_ops": dict(sorted(ops.items())), "rows": rows}


#: onnxruntime's session setting for whether its intra-op threads spin while they wait for work ("1", its default).
SPINNING = "session.intra_op.allow_spinning"


def spinning(texts: list[str], repeats: int) -> dict:
    """onnxruntime's intra-op threads spinning while they wait for work (its default) against waiting without
    spinning (:data:`SPINNING` "0", what poolkit's sessions do: ``onnx_graph.SESSION_CONFIG``): the float32 and int8
    graphs in poolkit's sessions otherwise (:func:`paired_passes`: the ratio spinning / waiting, over 1 where waiting
    is faster). Run it beside busy processes (``--background``) too: a spinning thread holds a core that another
    process could use."""
    encoder = _encoder("onnx")
    folder = onnx_graph.cached_graph(encoder, encoder.prompt, int8=True).folder

    def pairs() -> dict:
        return {graph: tuple(onnx_graph.OnnxSession(folder, int8=graph == "int8", session_config={SPINNING: flag})
                             for flag in ("1", "0")) for graph in ("float32", "int8")}
    return {"setting": SPINNING, "rows": paired_passes(encoder, texts, repeats, pairs, ("spinning", "waiting"))}


def rule_choice(grid: dict) -> dict | None:
    """The recipe the measurements choose: of those whose mean cosine to float32 over the throughput texts meets its
    target, the smallest file (to the MiB), then the fastest; None when none does. The retrieval set's nDCG@10 plays
    no part: it is the held-out check of the choice, scored on rows the choice never saw."""
    meeting = [c for c in grid["cells"] if c["mean_cosine"] >= COSINE_TARGET]
    return min(meeting, key=lambda c: (round(c["mib"]), c["ms"])) if meeting else None


def export_times() -> dict:
    """Seconds to export the default embedder's float32 graph and to add its int8 copy, into an empty cache."""
    with tempfile.TemporaryDirectory() as scratch:
        encoder = _encoder("torch")
        started = time.perf_counter()
        folder = onnx_graph.cached_graph(encoder, encoder.prompt, root=Path(scratch)).folder
        exported = time.perf_counter() - started
        started = time.perf_counter()
        onnx_graph.cached_graph(encoder, encoder.prompt, int8=True, root=Path(scratch))
        manifest = onnx_graph.read_manifest(folder)
        return {"float32_s": exported, "int8_s": time.perf_counter() - started,
                "parity_max_abs_diff": manifest["parity"]["max_abs_diff_to_torch"],
                "int8_cosine_to_float32": manifest["int8"]["cosine_to_float32"], "opset": manifest["opset"]}


def int8_over_float32(cell: dict, names: dict[str, str]) -> str:
    """'2 thread(s) 1.08x': one thread count's int8 texts / s over float32's, ``names`` the variant of each backend."""
    rate = {backend: cell["variants"][name]["texts_per_s"] for backend, name in names.items()}
    return f"{cell['threads']} thread(s) {rate['onnx-int8'] / rate['onnx']:.2f}x"


def unavailable(cell: dict) -> dict[str, str]:
    """A throughput cell's peers that did not run, and why (older result files hold sentence-transformers'
    ``backend="onnx"`` only, as ``st_onnx_unavailable``)."""
    if "unavailable" in cell:
        return cell["unavailable"]
    return {"sentence-transformers backend='onnx'": cell["st_onnx_unavailable"]} if cell["st_onnx_unavailable"] else {}


def render_throughput(result: dict) -> str:
    """One table per thread count, and the targets' verdicts at the default."""
    busy = result.get("background", 0)
    parts = [f"{result['texts']} texts of {result['source']} (tokens: mean {result['tokens']['mean']:.0f}, max "
             f"{result['tokens']['max']}), {result['repeats']} interleaved repeats"
             + (f", beside {busy} busy process(es) (a Python spin loop each)" if busy else "")
             + f"; load average at the end {result['load_average'][0]:.1f}"]
    for cell in result["throughput"]:
        rows = [[name, f"{v['texts_per_s']:.0f}", f"{v['vs_st']:.2f}x",
                 " ".join(f"{r:.2f}" for r in v["vs_st_per_repeat"])] for name, v in cell["variants"].items()]
        note = "".join(f"\n\n{name} does not run here: {why}" for name, why in unavailable(cell).items())
        note += "".join(f"\n\n{name}: " + ", ".join(f"{k} {v}" for k, v in peer["versions"].items())
                        + " in its own environment"
                        + (f", computing in {peer['computes_in']}" if "computes_in" in peer else "")
                        + f"; max |diff| to sentence-transformers encode's vectors "
                        f"{peer['max_abs_diff_to_st_torch']:.1e}" for name, peer in cell.get("peers", {}).items())
        parts.append(table(["encoder", "texts / s", "vs sentence-transformers encode", "per repeat"], rows,
                           title=f"{result['texts']} texts, batch {BATCH}, {cell['threads']} thread(s)") + note)
    default = result["throughput"][-1]["variants"]
    torch_rate = default["poolkit torch"]["texts_per_s"]
    parts.append("at the default thread count, over poolkit's own torch backend (texts / s): "
                 + ", ".join(f"{backend} {default[f'poolkit {backend}']['texts_per_s'] / torch_rate:.2f}x"
                             for backend in TARGETS))
    parts.append("targets at the default thread count: " + "; ".join(
        f"{backend} >= {target:g}x: {default[f'poolkit {backend}']['vs_st']:.2f}x, "
        f"{verdict(default[f'poolkit {backend}']['vs_st'] >= target)}" for backend, target in TARGETS.items()))
    if FLOORS["onnx"] in default:  # runs before the floors were measured have none
        parts.append("the floors (the linear layers' matmuls alone, on the same batches, nothing else: no pass of that "
                     "backend can be faster) at the default thread count: " + "; ".join(
                         f"{backend} {default[FLOORS[backend]]['vs_st']:.2f}x, the target {target:g}x "
                         + ("beyond" if default[FLOORS[backend]]["vs_st"] < target else "within")
                         + " its reach" for backend, target in TARGETS.items()))
        passes = {backend: f"poolkit {backend}" for backend in TARGETS}
        parts.append("int8 over float32 on this CPU (texts / s): the linear layers' matmuls alone (the floors) "
                     + ", ".join(int8_over_float32(cell, FLOORS) for cell in result["throughput"])
                     + "; whole passes " + ", ".join(int8_over_float32(cell, passes) for cell in result["throughput"]))
    return "\n\n".join(parts)


def render_cost(result: dict) -> str:
    """Peak RSS per backend and the export times."""
    export = result["export"]
    return (table(["backend", "peak RSS (MiB)"], [[k, f"{v:.0f}"] for k, v in result["rss_mib"].items()],
                       title="Peak resident memory: load the model, embed the texts once (a fresh process each)")
    + f"\n\nexport: float32 graph {export['float32_s']:.1f} s (opset {export['opset']}, max |diff| to torch on the "
      f"probe texts {export['parity_max_abs_diff']:.1e}), int8 copy {export['int8_s']:.1f} s")


def render_agreement(result: dict) -> str:
    rows = [[r["pooler"], f"{r['max_abs_diff']:.1e}", f"{r['lowest_cosine']:.7f}",
             verdict(r["max_abs_diff"] <= PARITY_TARGET)] for r in result["agreement"]]
    return table(["pooler", "max |diff|", "lowest cosine", f"<= {PARITY_TARGET:g}"], rows,
                 title=f"onnx vs torch over the {result['texts']} texts")


def render_int8(result: dict) -> str:
    """The grid of recipes, the rule's choice and the shipped recipe's verdicts."""
    grid = result["int8"]
    base = grid["float32"]["ndcg@10"]
    rows = [["float32", "", f"{grid['float32']['mib']:.0f}", "1", "1", f"{base:.4f}", "", ""]]
    for c in grid["cells"]:
        rows.append([("per channel" if c["per_channel"] else "per tensor") + (" (shipped)" if c["shipped"] else ""),
                     " + ".join(c["op_types"]), f"{c['mib']:.0f}", f"{c['mean_cosine']:.4f}",
                     f"{c['lowest_cosine']:.4f}", f"{c['ndcg@10']:.4f}", f"{c['ndcg@10'] - base:+.4f}",
                     f"{c['ms']:.0f}"])
    parts = [table(["int8 scales", "ops quantised", "MiB", "mean cosine", "lowest cosine", "nDCG@10",
                    "vs float32", "ms / pass"], rows,
                   title=f"int8 recipes: cosine to float32 over the texts, nDCG@10 on {RETRIEVAL}")]
    [shipped] = [c for c in grid["cells"] if c["shipped"]]
    chosen = rule_choice(grid)
    parts.append(f"the rule (mean cosine >= {COSINE_TARGET} over the throughput texts, then the smallest file, then the "
                 "fastest; nDCG@10 is not looked at) chooses "
                 + ("no recipe" if chosen is None else f"{'per channel' if chosen['per_channel'] else 'per tensor'}, "
                    f"{' + '.join(chosen['op_types'])}")
                 + f": {'the shipped one' if chosen is shipped else 'NOT the shipped one'}")
    parts.append(f"shipped recipe, the held-out check on {RETRIEVAL} included: mean cosine >= {COSINE_TARGET}: {shipped['mean_cosine']:.4f}, "
                 f"{verdict(shipped['mean_cosine'] >= COSINE_TARGET)}; nDCG@10 within {NDCG_TARGET} of float32: "
                 f"{shipped['ndcg@10'] - base:+.4f}, {verdict(abs(shipped['ndcg@10'] - base) <= NDCG_TARGET)}")
    return "\n\n".join(parts)


def render_trace(result: dict) -> str:
    """The traced attention against the model's own, per graph."""
    trace = result["trace"]
    rows = [["int8" if r["int8"] else "float32", f"{r['traced_ms']:.0f}", f"{r['own_ms']:.0f}", f"{r['speedup']:.2f}x",
             " ".join(f"{v:.2f}" for v in r["per_repeat"])] for r in trace["rows"]]
    return table(["graph", f"traced on {trace['traced']} (ms / pass)", f"on the model's own, {trace['own']} (ms / pass)",
                  "speedup", "per repeat"], rows,
                 title=f"{result['texts']} texts, batch {BATCH}, torch's default thread count, both graphs interleaved")


def is_product(op: str) -> bool:
    """A matrix product's kernel (float32 MatMul / FusedMatMul / Gemm, the int8 graph's DynamicQuantizeMatMul /
    MatMulIntegerToFloat...)."""
    return "MatMul" in op or "Gemm" in op


def render_profile(result: dict) -> str:
    """Each graph's time per op type, and whether its other ops fit in what the target leaves beyond the floor."""
    profile = result["profile"]
    graphs = profile["ms_per_pass"]
    totals = {graph: sum(ops.values()) for graph, ops in graphs.items()}
    ops = sorted({op for per_op in graphs.values() for op in per_op},
                 key=lambda op: -max(graphs[g].get(op, 0.0) / totals[g] for g in graphs))
    shown = [op for op in ops if any(graphs[g].get(op, 0.0) >= 0.005 * totals[g] for g in graphs)]
    rows = [[op] + [cell for g in graphs for cell in (f"{graphs[g].get(op, 0.0):.0f}",
                                                      f"{100 * graphs[g].get(op, 0.0) / totals[g]:.1f}%")]
            for op in shown]
    rest = [op for op in ops if op not in shown]
    rows.append([f"the other {len(rest)} op types"] + [cell for g in graphs for cell in (
        f"{sum(graphs[g].get(op, 0.0) for op in rest):.0f}",
        f"{100 * sum(graphs[g].get(op, 0.0) for op in rest) / totals[g]:.1f}%")])
    rows.append(["all"] + [cell for g in graphs for cell in (f"{totals[g]:.0f}", "100%")])
    parts = [table(["op type"] + [h for g in graphs for h in (f"{g}: ms / pass", "share")], rows,
                   title=f"onnxruntime's own profile of {profile['passes']} passes over the texts (the first "
                         f"included), {profile['threads']} thread(s): kernel time per op type")]
    cells = [c for c in result.get("throughput", []) if c["threads"] == profile["threads"]]
    if not cells:  # a run without the throughput part: nothing to read the profile against
        return parts[0]
    st_ms = cells[0]["variants"][ST]["ms"]
    cell = cells[0]
    for backend, graph in (("onnx", "float32"), ("onnx-int8", "int8")):
        target_ms, floor_ms = st_ms / TARGETS[backend], cell["variants"][FLOORS[backend]]["ms"]
        others = sum(ms for op, ms in graphs[graph].items() if not op.endswith(WEIGHTS))
        line = (f"{backend} at {profile['threads']} thread(s): a pass at the target {TARGETS[backend]:g}x takes "
                f"{target_ms:.0f} ms")
        if floor_ms >= target_ms:
            parts.append(line + f", less than the linear layers' floor ({floor_ms:.0f} ms): beyond any graph's reach")
            continue
        fits = others <= target_ms - floor_ms
        parts.append(line + f", {target_ms - floor_ms:.0f} ms more than the linear layers' floor; the {graph} graph's "
                     f"ops other than its products by a weight take {others:.0f} ms per pass: "
                     + ("within that margin" if fits else "more than that margin, so this graph misses the target "
                        "here even with its products by a weight at the floor"))
    return "\n\n".join(parts)


def paired_table(result: dict, rows: list[dict], names: tuple[str, str], headers: tuple[str, str]) -> str:
    """:func:`paired_passes` ' rows as a table, each session's column under its header."""
    cells = [[r["graph"], str(r["threads"]), *(f"{r[name + '_ms']:.0f}" for name in names), f"{r['speedup']:.2f}x",
              " ".join(f"{v:.2f}" for v in r["per_repeat"]), f"{r['max_abs_diff']:.1e}"] for r in rows]
    return table(["graph", "threads", *headers, "speedup", "per repeat", "max |diff|"], cells,
                 title=f"{result['texts']} texts, batch {BATCH}, both sessions interleaved")


def render_fusions(result: dict) -> str:
    """Passes with onnxruntime's default optimisations against poolkit's sessions, per graph and thread count."""
    found = result["fusions"]
    left_out = ", ".join(found["left_out"])
    faster = sum(r["speedup"] > 1 for r in found["rows"])
    return (paired_table(result, found["rows"], ("defaults", "poolkit"),
                         ("onnxruntime's defaults (ms / pass)", f"without {left_out} (ms / pass)"))
            + f"\n\nleaving out {left_out} (what poolkit's sessions do): faster in {faster} of {len(found['rows'])} "
              "cells")


def render_rewrites(result: dict) -> str:
    """Passes of the shipped graphs against onnxscript's rewrite of them, per graph and thread count."""
    found = result["rewrites"]
    made = ", ".join(f"{name} {count}" for name, count in found["made"].items())
    faster, _ = every_repeat(found["rows"])
    return (paired_table(result, found["rows"], ("shipped", "rewritten"),
                         ("as shipped (ms / pass)", "onnxscript's fusions (ms / pass)"))
            + f"\n\nonnxscript {found['onnxscript']}'s optimize_for_ort made: {made}; the rewritten graph was faster "
              f"than the shipped one in every repeat in {faster} of {len(found['rows'])} cells"
            + ("" if "int8_ops" not in found else "\n\nthe rewrite's int8 copy quantises "
               + ", ".join(found["int8_recipe"]["op_types"]) + ": "
               + ", ".join(f"{op} {n}" for op, n in found["int8_ops"].items()
                           if op in ("QAttention", "Attention", "DynamicQuantizeMatMul", "MatMulInteger", "MatMul"))))


def render_spinning(result: dict) -> str:
    """Passes with onnxruntime's threads spinning against waiting without spinning, per graph and thread count."""
    found = result["spinning"]
    rows = found["rows"]
    faster, slower = every_repeat(rows)
    busy = f", beside {result['background']} busy processes" if result.get("background") else ", no other load"
    return (paired_table(result, rows, ("spinning", "waiting"),
                         ("threads spinning, the default (ms / pass)", "waiting without spinning (ms / pass)"))
            + f"\n\n{found['setting']} 0 (threads wait without spinning){busy}: faster in every repeat in {faster} "
              f"of {len(rows)} cells, slower in every repeat in {slower}")


#: What a run measures (``--parts``), each with its renderer, in the order printed.
RENDERERS = {"throughput": render_throughput, "cost": render_cost, "agreement": render_agreement,
             "trace": render_trace, "profile": render_profile, "fusions": render_fusions, "rewrites": render_rewrites,
             "spinning": render_spinning, "int8": render_int8}
PARTS = tuple(RENDERERS)


def render(result: dict) -> str:
    """Every block, as printed at the end of a run."""
    return "\n\n".join(render_part(result) for part, render_part in RENDERERS.items() if part in result["parts"])


def main(argv: list[str] | None = None) -> dict:
    def part_list(text: str) -> list[str]:
        if unknown := sorted(set(text.split(",")) - set(PARTS)):
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}: choose from {', '.join(PARTS)}")
        return [part for part in PARTS if part in text.split(",")]

    def options(parser) -> None:
        parser.add_argument("--texts", type=int, default=1000, help="number of texts (default 1000)")
        parser.add_argument("--parts", type=part_list, default=list(PARTS),
                            help="comma-separated subset of what is measured: " + ", ".join(PARTS) + " (default all)")

    args, _ = parse_and_setup(__doc__, argv, options)  # a bad option exits here, before any busy process starts
    parts = args.parts
    repeats = args.repeats or 5
    default_threads = DEFAULT_THREADS  # measured at 1 thread and at torch's default, whatever --threads says
    texts, source = real_texts(args.texts)
    provenance = run_provenance()  # before any work: the code that runs is the tree as it is now
    was = os.environ.get("POOLKIT_CACHE")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["POOLKIT_CACHE"] = cache  # a fresh cache: every export here is measured, none reused
        import onnxruntime

        result = {"provenance": provenance, "onnxruntime": onnxruntime.__version__, "texts": len(texts),
                  "source": source, "batch": BATCH, "parts": parts, "background": args.background,
                  "repeats": repeats, "session_config": dict(onnx_graph.SESSION_CONFIG)}
        if "cost" in parts:
            result["export"] = export_times()
        tokens = [len(ids) for ids in _encoder("torch").tokenizer(texts, truncation=True, max_length=256)["input_ids"]]
        result["tokens"] = {"mean": float(np.mean(tokens)), "max": int(max(tokens))}
        if "throughput" in parts:
            result["throughput"] = [throughput(texts, threads, repeats) for threads in sorted({1, default_threads})]
        if "cost" in parts:
            result["rss_mib"] = {backend: peak_rss(backend, len(texts)) for backend in ("torch", "onnx", "onnx-int8")}
        torch.set_num_threads(default_threads)
        for part, measure in (("agreement", agreement), ("trace", lambda some: traced_attention(some, repeats)),
                              ("profile", op_profile), ("fusions", lambda some: fusions(some, repeats)),
                              ("rewrites", lambda some: rewrites(some, repeats)),
                              ("spinning", lambda some: spinning(some, repeats)),
                              ("int8", lambda some: int8_grid(some, repeats=2))):
            if part in parts:
                result[part] = measure(texts)
    if was is None:  # run_all goes on with other suites in this process
        os.environ.pop("POOLKIT_CACHE")
    else:
        os.environ["POOLKIT_CACHE"] = was
    result["load_average"] = os.getloadavg()
    print(render(result))
    save_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
