"""The performance suite's own machinery: what it times, and the before/after import of an old revision."""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import perf_common
import perf_revisions


def test_timed_call_sends_a_dense_gradient_and_clears_the_leaves():
    x = torch.randn(4, 3, requires_grad=True)
    seen = []

    def fn():
        out = x * 2
        out.register_hook(lambda g: seen.append(g))
        return out

    run = perf_common.timed_call(fn, train=True, leaves=[x])
    run()
    run()
    assert len(seen) == 2 and torch.equal(seen[0], seen[1])  # the same fixed gradient every call
    assert 0 not in seen[0].stride() and seen[0].abs().sum() > 0  # dense, not an expanded view
    assert x.grad is None

    modes = []
    perf_common.timed_call(lambda: modes.append(torch.is_inference_mode_enabled()) or x, train=False)()
    assert modes == [True]


def test_interleaved_ratio_is_the_median_of_per_repeat_ratios():
    times = {"a": [2.0, 4.0, 9.0], "b": [1.0, 1.0, 1.0]}
    assert perf_common.ratio(times, "a", "b") == 4.0
    assert perf_common.spread(times, "a", "b") == (2.0, 9.0)
    calls = {"a": 0, "b": 0}
    out = perf_common.interleaved({k: (lambda k=k: calls.__setitem__(k, calls[k] + 1)) for k in calls},
                                  torch.device("cpu"), repeats=3, min_sample_s=0.0, warmup=1)
    assert [len(v) for v in out.values()] == [3, 3] and calls["a"] == calls["b"] == 4


@pytest.mark.slow
def test_revisions_compares_an_exported_revision_with_the_working_tree(tmp_path):
    before = perf_revisions.import_revision("HEAD", tmp_path)
    assert before.__name__ == "poolkit_before" and Path(before.__file__).is_relative_to(tmp_path)
    x, mask = torch.randn(3, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1] * 5, [1, 0, 0, 0, 0]])
    from poolkit import get_pooler
    assert torch.allclose(before.get_pooler("mean", hidden_size=8)(x, mask), get_pooler("mean", hidden_size=8)(x, mask))
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("poolkit_before")]:
        del sys.modules[name]

    result = perf_revisions.main(["--against", "HEAD", "--poolers", "mean,cls", "--repeats", "3", "--threads", "0"])
    assert len(result["rows"]) == 8  # 2 sizes x 2 dtypes x 2 modes
    # Each cell is the median of the three per-repeat ratios it records: a ratio of the medians, a mean of the
    # ratios, or a cell not computed from the recorded repeats gives another figure.
    for row in result["rows"]:
        for name in ("mean", "cls"):
            assert len(row["per_repeat"][name]) == 3
            assert row["speedup"][name] == statistics.median(row["per_repeat"][name])


def test_per_repeat_ratios_and_run_info():
    times = {"a": [2.0, 4.0, 9.0], "b": [1.0, 2.0, 3.0]}
    assert perf_common.per_repeat(times, "a", "b") == [2.0, 2.0, 3.0]
    info = perf_common.run_info(torch.device("cpu"))
    assert len(info["commit"]) == 40 and info["torch"] == torch.__version__ and info["machine"]["cores"]
    assert all(not path.startswith(" ") and Path(path).name for path in info["uncommitted"])


@pytest.mark.slow
def test_paths_times_plain_against_fast_forms_and_renders(tmp_path):
    import perf_paths
    from pages import performance

    out = tmp_path / "paths.json"
    result = perf_paths.main(["--poolers", "mean,max", "--repeats", "2", "--threads", "0", "--json", str(out)])
    assert len(result["rows"]) == 8 and result["kind"] == "paths"
    for row in result["rows"]:
        assert len(row["per_repeat"]["max"]) == 2 and row["max_abs_diff"]["mean"] < 1e-2
    text = performance.render(out, 0.05)
    assert "| max " in text and "T512 D768 bf16 fwd+bwd" in text
    assert performance.blocks([out]) == {"paths.json": text, "rule: paths": performance.rule_block([out])}
    assert performance.group_name(result) == f"agreement: paths {result['commit'][:7]}"  # runs of one tree agree
    both = performance.agreement([out, out], 0.05)  # one run twice: every listed cell agrees with itself
    assert "`paths.json` (2 repeats), `paths.json` (2 repeats)" in both


def test_floor_is_the_fastest_candidate_in_each_repeat():
    import perf_tokens
    # Per repeat the floor is min(a, b) = 1.0, 0.5, 0.8, so the ratios are 1.0, 2.0, 2.5: median 2.0. The
    # minimum of the candidates' medians (1.0), the ratio of medians (1.25), the first candidate alone (1.0)
    # or the slowest candidate (0.5) all give another figure.
    times = {"p": [1.0, 1.0, 2.0], "a": [2.0, 0.5, 2.0], "b": [1.0, 2.0, 0.8]}
    cell = perf_tokens.floor_ratio(times, "p", ["a", "b"])
    assert cell["ratio"] == 2.0 and cell["per_repeat"] == [1.0, 2.0, 2.5]
    assert cell["fastest_floor"] == {"a": 1, "b": 2} and cell["floor_ms"] == 800.0 and not cell["below_floor"]


@pytest.mark.parametrize("pooler_time, flagged", [(0.94, True), (0.96, False), (1.5, False)])
def test_a_pooler_faster_than_its_floor_is_flagged(pooler_time, flagged):
    import perf_tokens
    # A flag at < 1 would flag 0.96 (noise); one on floor / pooler would flag 1.5 instead of 0.94.
    cell = perf_tokens.floor_ratio({"p": [pooler_time] * 3, "f": [1.0] * 3}, "p", ["f"])
    assert cell["below_floor"] is flagged


def test_attention_floors_do_the_poolers_work():
    import perf_tokens
    from poolkit import get_pooler
    from poolkit.pooling import fast

    x = torch.randn(3, 6, 8)
    mask = torch.tensor([[1] * 6, [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]]).bool()
    pooler = get_pooler("gated_attention", hidden_size=8, attn_size=4)
    _, calls, _ = perf_tokens.attention_floor(pooler, x, mask, train=False)
    both = torch.cat([pooler.value.weight, pooler.gate.weight])
    # Eager CPU scores the real tokens only, and so does the floor (the old floor took all 18 positions); without a
    # gradient, torch's product and oneDNN's linear (the same product), in training torch's only (oneDNN's has none).
    assert list(calls) == ["", perf_tokens.ONEDNN] if perf_tokens.onednn_floors(x.device) else [""]
    for call in calls.values():
        torch.testing.assert_close(call(), x[mask] @ both.T)
    assert list(perf_tokens.attention_floor(pooler, x, mask, train=True)[1]) == [""]
    with fast.disabled():  # the plain forms score every position: so does the floor
        assert perf_tokens.attention_floor(pooler, x, mask, train=False)[1][""]().shape == (18, 8)

    latent = get_pooler("latent", hidden_size=8, num_queries=2, num_heads=2)
    what, calls, leaves = perf_tokens.attention_floor(latent, x.requires_grad_(), mask, train=True)
    # One read of x by the H * Q query rows, and each of the 5 Linear weights once: no D x D token projection.
    assert list(calls) == ["", perf_tokens.GRADIENT_IN_PLACE]
    assert calls[""]().shape == (3, 4, 6) and len(leaves) == 1 + 5 and "5 query-side products" in what
    torch.testing.assert_close(calls[perf_tokens.GRADIENT_IN_PLACE](), calls[""]().transpose(1, 2))
    gradients = []
    for layout in (lambda: calls[""]().transpose(1, 2), calls[perf_tokens.GRADIENT_IN_PLACE]):
        layout().pow(2).sum().backward()
        gradients.append([leaf.grad for leaf in leaves])
        for leaf in leaves:
            leaf.grad = None
    assert all(grad is not None for grad in gradients[0])
    for ours, theirs in zip(*gradients):  # the same work: every leaf's gradient the same
        torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("name, options, degree", [("latent", {}, 1), ("adapool", {}, 2),
                                                    ("adapool", {"query_index": 0}, 1)])
def test_adapools_floor_reads_x_for_its_query_where_its_query_is_their_mean(name, options, degree):
    """adapool's default query is the mean of the tokens, so its floor's queries come from x (summed over its tokens)
    and the floor is of degree 2 in x: floor(2x) = 4 floor(x) (its products have no bias); latent's learned queries
    and adapool's one picked token (a gather, no read of x) leave it of degree 1. Catches the read left out (a floor
    doing less than the pooler must), or added where the pooler does not do it."""
    import perf_tokens
    from poolkit import get_pooler

    x = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(4))
    mask = torch.ones(3, 6, dtype=torch.bool)
    pooler = get_pooler(name, hidden_size=8, **options)
    what, calls, _ = perf_tokens.attention_floor(pooler, x, mask, train=False)
    doubled = perf_tokens.attention_floor(pooler, 2 * x, mask, train=False)[1]
    for way, call in calls.items():
        torch.testing.assert_close(doubled[way](), 2 ** degree * call())
    assert ("the sum of x over its tokens" in what) == (degree == 2)


@pytest.mark.parametrize("queries", [1, 3])
def test_the_read_once_floor_writes_torchs_gradient_in_the_tokens_layout(queries):
    """perf_tokens.ReadOnce (latent / adapool's floor way with x's gradient written once in x's layout) against
    torch's bmm: the same values and gradients, x's contiguous. Catches a floor that skips the gradient's work or
    computes a wrong one (a transposed or unsummed query gradient)."""
    import perf_tokens

    gen = torch.Generator().manual_seed(3)
    x, q = torch.randn(2, 5, 4, generator=gen), torch.randn(2, queries, 4, generator=gen)
    g = torch.randn(2, 5, queries, generator=gen)
    xs, qs = [x.clone().requires_grad_() for _ in range(2)], [q.clone().requires_grad_() for _ in range(2)]
    ours, theirs = perf_tokens.ReadOnce.apply(xs[0], qs[0]), torch.bmm(qs[1], xs[1].transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(ours, theirs)
    got, expected = torch.autograd.grad(ours, [xs[0], qs[0]], g), torch.autograd.grad(theirs, [xs[1], qs[1]], g)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    assert got[0].is_contiguous()


@pytest.mark.parametrize("name", ["attention", "latent"])
def test_a_half_precision_floor_is_also_timed_in_float32_on_the_same_leaves(name):
    """In bf16 each attention floor has a float32 way: the same product from upcast inputs (so the same values to bf16
    rounding) whose gradient reaches the bf16 leaves. Catches a float32 way that skips the cast (timing less work) or
    detaches its inputs (timing no backward)."""
    import perf_tokens
    from poolkit import get_pooler

    x = torch.randn(3, 6, 8).bfloat16().requires_grad_()
    mask = torch.tensor([[1] * 6, [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]]).bool()
    pooler = get_pooler(name, hidden_size=8).bfloat16()
    _, calls, leaves = perf_tokens.attention_floor(pooler, x, mask, train=True)
    ways = ["", perf_tokens.IN_FLOAT32]
    assert list(calls) == (ways if name == "attention" else ways + [w + perf_tokens.GRADIENT_IN_PLACE for w in ways])
    half, wide = calls[""](), calls[perf_tokens.IN_FLOAT32]()
    assert half.dtype == torch.bfloat16 and wide.dtype == torch.float32
    torch.testing.assert_close(wide.bfloat16(), half, rtol=0.02, atol=0.02)
    for call in calls.values():
        call().sum().backward()
        assert all(leaf.grad is not None and leaf.grad.dtype == torch.bfloat16 for leaf in leaves)
        for leaf in leaves:
            leaf.grad = None


def test_the_statistics_floor_reads_the_real_tokens_in_forward_and_x_in_training(monkeypatch):
    """In forward a masked statistic's floor is the fastest read of the real tokens, gathered before timing; in
    training, the max's as the mean's and sum's, the fastest read of x itself, x the leaf, so that it writes x's whole
    (B, T, D) gradient as the pooler does (the max's is zero but at the holders, still a tensor of x's size). Catches a
    forward floor that reads the padding or gathers in the timed call, a training floor that reads the gathered real
    tokens (it writes less gradient than the pooler must), max's training floor timed against torch's maxima with
    their gradients again (the pooler beat those: not a floor), and old runs rendered with the new wording."""
    import perf_tokens
    from poolkit import get_pooler

    x = torch.randn(3, 5, 4).requires_grad_()
    mask = torch.ones(3, 5, dtype=torch.bool)
    padded = mask.clone()
    padded[1, 3:] = padded[2, 1:] = False  # 9 real tokens of 15
    read = []
    monkeypatch.setitem(perf_tokens.READ_REAL, "real.clone()", lambda r: read.append(r) or r.clone())
    monkeypatch.setitem(perf_tokens.READ_ONCE, "x.clone()", lambda r: read.append(r) or r.clone())
    for name, train in (("max", False), ("mean", False), ("sum", False), ("max", True), ("mean", True), ("sum", True)):
        calls, candidates, _ = perf_tokens.floor_of(name, get_pooler(name, 4), x, padded, train)
        if not train:  # forward: the real tokens, and only those, gathered before timing
            assert candidates == list(perf_tokens.READ_REAL)
            calls["real.clone()"]()
            calls["real.clone()"]()
            assert torch.equal(read[-1], x.detach()[padded]) and read[-1].data_ptr() == read[-2].data_ptr()
        else:  # training: x itself, or the gathered real tokens then x's gradient, its whole gradient written
            gathered = [way + perf_tokens.WRITE_ALL for way in perf_tokens.READ_REAL_IN_TRAINING]
            assert candidates == list(perf_tokens.READ_ONCE) + gathered
            calls["x.clone()"]()
            assert read[-1] is x
            for way in ("x.sum(1)", *gathered):
                seen = []
                hook = x.register_hook(lambda g: seen.append(g))
                calls[way]()  # timed with its backward into x itself, its gradient dropped after
                hook.remove()
                assert len(seen) == 1 and seen[0].shape == x.shape and x.grad is None
                assert way == "x.sum(1)" or seen[0].is_contiguous()  # written, not a view (autograd densifies x.sum's)
            monkeypatch.setitem(perf_tokens.READ_REAL, "real.sum()", lambda r: read.append(r) or r.sum())
            calls, _, _ = perf_tokens.floor_of(name, get_pooler(name, 4), x, padded, train)
            calls[gathered[0]]()
            assert torch.equal(read[-1], x.detach()[padded])  # the real tokens, gathered before the timed call
    new = {"read_real": ["real.sum(0)"], "read_once": ["x.sum(1)"], "max_reads_once": True}
    title = perf_tokens.families({"settings": new})[0][0]
    assert "read the real tokens once (in training: x)" in title and "max in training" not in title
    title = perf_tokens.families({"settings": {**new, "real_reads_in_training": ["real.sum()"]}})[0][0]
    assert "read the real tokens once (in training: x, or the real tokens, x's whole gradient written)" in title
    settings = {"max_with_holder": ["x.amax(1)"], "read_real": ["real.sum(0)"], "read_once": ["x.sum(1)"]}
    titles = [family[0] for family in perf_tokens.families({"settings": settings})]
    assert "max in training: vs torch's max with its gradient" in titles[0]
    assert "read the real tokens once (mean and sum in training: x)" in titles[0]
    del settings["read_once"]  # 6e4c7be's runs: the real tokens in training too
    assert "read the real tokens once (max" in perf_tokens.families({"settings": settings})[0][0]
    assert perf_tokens.families({"settings": {}}) == perf_tokens.FAMILIES  # older runs read as they were measured


def test_a_floor_read_on_one_thread_runs_on_one_and_restores_the_count():
    """perf_tokens.on_one_thread: the read runs with torch on one thread, and the count in use comes back after it,
    also when the read raises. Catches a read left at the run's thread count (then it is the same way twice) and a
    count left at one for the pooler timed next."""
    import perf_tokens

    was = torch.get_num_threads()
    seen = []
    try:
        torch.set_num_threads(2)
        read = perf_tokens.on_one_thread(lambda r: seen.append(torch.get_num_threads()) or r.sum())
        assert read(torch.ones(3)) == 3 and seen == [1] and torch.get_num_threads() == 2
        with pytest.raises(ZeroDivisionError):
            perf_tokens.on_one_thread(lambda r: 1 / 0)(torch.ones(3))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(was)


def test_token_floors_run_and_render(tmp_path):
    import perf_tokens
    import rendering
    from pages import performance

    rows = perf_tokens.run_config(8, 8, "fp32", "fwd+bwd", torch.device("cpu"), repeats=1, min_sample_s=0)
    assert [r["pooler"] for r in rows] == perf_tokens.STAT_POOLERS + perf_tokens.ATTENTION_POOLERS
    for row in rows:  # the ratio is against the floor recorded with it (with one repeat: their times' ratio)
        assert row["ratio"] == row["per_repeat"][0] == pytest.approx(row["ms"] / row["floor_ms"])
    assert set(rows[0]["fastest_floor"]) <= set(perf_tokens.READ_ONCE)  # the mean in training
    # torch's own unmasked op per statistic, in the same repeats: op / floor times pooler / op is pooler / floor
    assert [r["torch_op"]["op"] for r in rows[:3]] == ["x.mean(1)", "x.sum(1)", "x.amax(1)"]
    assert all("torch_op" not in r for r in rows[3:])
    for row in rows[:3]:
        assert row["torch_op"]["ratio"] * row["torch_op"]["pooler_over_op"] == pytest.approx(row["ratio"])
    rows[0]["torch_op"].update(ratio=1.5, pooler_over_op=1.2)
    rows[1]["torch_op"].update(ratio=1.1, pooler_over_op=1.4)
    rows[2]["torch_op"].update(ratio=1.2, pooler_over_op=1.3)

    rows[0].update(ratio=0.9, below_floor=True)  # mean under its floor: flagged
    rows[3].update(ratio=1.4)  # attention over its 1.2x target: that family misses, latent / adapool not judged here
    for row in rows[6:]:
        row["ratio"] = 1.1
    result = {"kind": "floors", **perf_common.run_info(torch.device("cpu")), "rows": rows,
              "settings": {"threads": 1, "batch": perf_tokens.BATCH, "repeats": 1}}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"kind": "bench", "suites": {"tokens": result}}))
    blocks = performance.blocks([path])
    assert list(blocks) == ["bench.json", "bench.json targets"]
    stale = "".join(f"<!-- begin:{n} -->\nSTALE\n<!-- end:{n} -->\n" for n in blocks)
    text = rendering.replace_blocks(stale, blocks)
    assert "STALE" not in text and "| mean   | 0.90 ! " in text
    assert "Not a floor (ratio under 0.95): `mean` T8 D8" in text
    assert "| `x.mean(1)` (mean)   | 1.50 * (1.20)" in text and "| `x.sum(1)` (sum)     | 1.10 (1.40)" in text
    assert ("torch's own op over the tokens, unmasked (x.mean(1), x.sum(1), x.amax(1)), against the same floor | over "
            "1.3x in 1 of 3 cells, 0 of them missed by the pooler too; the pooler within 1.3x of the op in 2 of 3 "
            "cells | reference |") in text
    verdicts = [line.rsplit("|", 2)[1].strip() for line in text.splitlines() if "<= 1." in line and "cells" in line]
    assert verdicts == ["**missed**" if any(r["ratio"] > 1.3 for r in rows[:3]) else "met", "**missed**", "met"]


def test_half_precision_floors_say_how_often_float32_was_the_faster_way():
    """A bf16 cell times each attention floor both ways and the table says in how many repeats float32 won; a result
    made before the float32 way existed says nothing of it. Catches a count over the wrong rows or repeats."""
    import perf_tokens

    rows = perf_tokens.run_config(8, 8, "bf16", "fwd", torch.device("cpu"), repeats=2, min_sample_s=0)
    attention = [r for r in rows if r["pooler"] in perf_tokens.ATTENTION_POOLERS]
    assert all(sum(r["fastest_floor"].values()) == 2 for r in attention)
    won = sum(count for r in attention for way, count in r["fastest_floor"].items()  # latent / adapool: two ways each
              if way.startswith(f"floor of {r['pooler']}{perf_tokens.IN_FLOAT32}"))
    result = {"rows": rows, "settings": {"half_floors_in_float32": True}}
    assert f"float32 was the faster in {won} of {2 * len(attention)} repeats" in perf_tokens.render(result)
    assert "float32 was the faster" not in perf_tokens.render({"rows": rows, "settings": {}})


def _suites(snippet_speedups, memory_shares, model_shares, embed_speedup) -> dict:
    """run_all's suites 2-5 in miniature: only the fields the renderer reads."""
    snippets = [{"comparison": f"c{i}", "T": 8, "D": 8, "mode": mode, "target": target, "speedup": value,
                 "per_repeat": [value]} for i, (mode, target, value) in enumerate(snippet_speedups)]
    snippets[-1]["comparison"] = "weighted_layer + cls: snippet"
    memory = [{"variant": variant, "mode": mode, "added_mb": 1.0, "states_mb": 10.0, "share": share,
               "method": "VmHWM", "poolkit": variant.startswith("poolkit")}
              for variant, shares in memory_shares.items() for mode, share in zip(("infer", "train"), shares)]
    model = {name: {"repeats": 1, "mode": mode,
                    "rows": [{"pooler": p, "share": v, "pooler_ms": 1.0, "encoder_ms": 50.0}
                             for p, v in zip(("mean", "attention"), shares)]}
             for name, mode, shares in zip(("model", "model_train"), ("forward", "forward + backward"), model_shares)}
    load = {"start": [1.0, 1.0, 1.0], "end": [2.0, 2.0, 2.0]}
    suites = {"snippets": {"repeats": 1, "rows": snippets}, "memory": {"rows": memory}, **model,
              "embed": {"repeats": 1, "texts": 10, "speedup": embed_speedup, "per_repeat": [embed_speedup],
                        "agreement": 1.0, "st_ms": 100.0, "poolkit_ms": 100.0 / embed_speedup}}
    for suite in suites.values():
        suite["load_average"] = load
    return suites


def _verdicts(block: str) -> list[str]:
    return [line.rsplit("|", 2)[1].strip() for line in block.splitlines() if re.match(r"\| \d", line)]


def test_suites_2_to_5_targets_judge_every_cell():
    from pages import performance

    memory = {"snippet: stack": (1.7, 1.7), "poolkit weighted_layer + cls": (0.005, 0.006),
              "poolkit weighted_layer + attention": (0.04, 0.15), "reference: attention": (0.2, 0.2)}
    met = _suites([("fwd", 1.0, 1.1), ("fwd", 100.0, 150.0)], {k: (0.05, 0.05) if k.startswith("poolkit") else v
                                                             for k, v in memory.items()},
                  [(0.01, 0.019), (0.01, 0.019)], 1.25)
    assert _verdicts(performance.suites_targets(met)) == ["met"] * 4
    # Each target fails on one cell alone: a snippet comparison under 1x in fwd+bwd; a poolkit layer pooler in
    # training over 10% (the snippet and reference rows, over it too, are not poolkit's and do not count); one
    # pooler over 2% of the forward + backward only; 1.1x embedding throughput is the target met, the aim missed.
    missed = _suites([("fwd+bwd", 1.0, 0.9), ("fwd", 100.0, 150.0)], memory, [(0.01, 0.019), (0.01, 0.021)], 1.1)
    block = performance.suites_targets(missed)
    assert _verdicts(block) == ["**missed**", "**missed**", "**missed**", "met"]
    assert "lowest against its target: c0 fwd+bwd 0.90x" in block and "1.10x (per repeat 1.10x)" in block
    assert "3 of 4 poolkit cells within; highest: poolkit weighted_layer + attention (train) 15.0%" in block
    assert "aim missed" in block and "forward + backward: highest `attention` 2.10%" in block
    # The 100x target binds the weighted-layer forward: 99x misses it although it is >= 1x.
    assert _verdicts(performance.suites_targets(_suites([("fwd", 100.0, 99.0)], memory,
                                                               [(0.01, 0.01)] * 2, 1.3)))[0] == "**missed**"


def test_padding_target_row_is_read_from_the_dynamic_padding_file():
    from pages import performance

    results = Path(__file__).resolve().parents[1] / "results"
    data = json.loads((results / "dynamic_padding.json").read_text())
    first = data["datasets"][0]["summary"]
    row = performance.padding_target(data).splitlines()[2]
    assert f"{first['cpu_speedup']:.2f}x per CPU s ({first['speedup']:.2f}x wall)" in row
    assert row.endswith("| met |") == all(d["summary"]["target_met"] for d in data["datasets"])
    data["datasets"][-1]["summary"]["target_met"] = False  # one dataset under target: the row is missed
    assert performance.padding_target(data).splitlines()[2].endswith("| **missed** |")


def test_performance_page_is_rendered_from_its_committed_results(tmp_path):
    from pages import performance

    from poolkit.errors import PoolkitError

    text = performance.PAGE.file().read_text()
    marked = dict.fromkeys(re.findall(r"<!-- begin:(\S+\.json)", text))
    # Every file the page marks is rendered (whole, or as a condition run's target rows), each list in page order.
    assert set(marked) == set(performance.FILES) | set(performance.CONDITIONS)
    for rendered in (performance.FILES, performance.CONDITIONS):
        assert [name for name in marked if name in rendered] == list(dict.fromkeys(rendered))
    assert performance.PAGE.update(text)[1] == []
    # A figure typed over the render is caught, and the block named.
    edited = text.replace("Not a floor (ratio under 0.95): none", "Not a floor (ratio under 0.95): many", 1)
    assert edited != text and performance.PAGE.update(edited)[1] == ["bench-cpu-quick-tokens.json"]
    # So is a block whose suite the file no longer holds (a result re-run without it).
    name = "bench-cpu-quick-snippets-memory-model-model_train-embed.json"
    data = json.loads((performance.RESULTS / name).read_text())
    del data["suites"]["embed"]
    (tmp_path / name).write_text(json.dumps(data))
    paths = [tmp_path / name if f == name else performance.RESULTS / f for f in performance.FILES]
    page = performance.PAGE.__class__(performance.PAGE.path, lambda: performance.blocks(
        paths, conditions=[performance.RESULTS / f for f in performance.CONDITIONS]))
    with pytest.raises(PoolkitError, match=f"marked but not rendered: \\['{name} embed'\\]"):
        page.update(text)


def test_the_int8_rule_picks_the_smallest_recipe_that_meets_the_cosine_target_and_never_reads_ndcg():
    """Catches a rule that ships a recipe failing the cosine target because it is small or fast, and one that looks
    at nDCG@10, the held-out check (the choice would then see the rows it is scored on)."""
    import perf_onnx

    def cell(mib, cosine, ms, ndcg=0.30):
        return {"mib": mib, "mean_cosine": cosine, "ndcg@10": ndcg, "ms": ms}

    small_but_loose, bigger, slower = cell(10, 0.97, 100, ndcg=0.40), cell(50, 0.999, 100), cell(20, 0.99, 300)
    chosen = cell(20, 0.985, 200, ndcg=0.10)  # the worst nDCG@10: the rule must not care
    grid = {"float32": {"ndcg@10": 0.30}, "cells": [small_but_loose, bigger, slower, chosen]}
    assert perf_onnx.rule_choice(grid) is chosen
    assert perf_onnx.rule_choice({**grid, "cells": [small_but_loose]}) is None


def test_every_committed_int8_grid_chooses_the_recipe_poolkit_ships_and_it_meets_both_targets():
    """The shipped recipe (poolkit.models.onnx_graph.INT8) against every committed run of the int8 part, on any CPU:
    the rule's choice, with mean cosine and nDCG@10 at their targets. Catches a recipe changed without a run that
    supports it, and a run on another CPU (or after a session change, such as a fusion left out) that the shipped
    recipe fails."""
    import perf_onnx
    from pages import onnx as onnx_page
    from poolkit.models import onnx_graph

    grids = {path.name: json.loads(path.read_text())["int8"] for path in sorted(onnx_page.RESULTS.glob("onnx*.json"))
             if "int8" in json.loads(path.read_text())}
    assert {"onnx.json", "onnx-zen2-int8.json"} <= set(grids)
    for name, grid in grids.items():
        chosen = perf_onnx.rule_choice(grid)
        assert chosen is not None, name
        assert {key: chosen[key] for key in onnx_graph.INT8} == onnx_graph.INT8, name
        assert chosen["mean_cosine"] >= perf_onnx.COSINE_TARGET, name
        assert abs(chosen["ndcg@10"] - grid["float32"]["ndcg@10"]) <= perf_onnx.NDCG_TARGET, name


def test_the_throughput_page_says_what_int8_weights_give_on_this_cpu_per_thread_count():
    """int8 over float32 per thread count, for the linear layers' matmuls alone (the floors) and for whole passes.
    Catches a ratio inverted, or read off the wrong cell or the wrong rows."""
    import perf_onnx

    def cell(threads, float32, int8):
        rates = {"sentence-transformers encode": 10, "poolkit torch": 12, "poolkit onnx": 14, "poolkit onnx-int8": 15,
                 perf_onnx.FLOORS["onnx"]: float32, perf_onnx.FLOORS["onnx-int8"]: int8}
        return {"threads": threads, "st_onnx_unavailable": None,
                "variants": {name: {"texts_per_s": rate, "vs_st": rate / 10, "vs_st_per_repeat": [rate / 10]}
                             for name, rate in rates.items()}}

    result = {"texts": 8, "source": "t", "tokens": {"mean": 4, "max": 8}, "repeats": 1, "load_average": [0.5],
              "throughput": [cell(1, 20, 40), cell(2, 40, 41)]}
    assert ("int8 over float32 on this CPU (texts / s): the linear layers' matmuls alone (the floors) 1 thread(s) "
            "2.00x, 2 thread(s) 1.02x; whole passes 1 thread(s) 1.07x, 2 thread(s) 1.07x") in perf_onnx.render_throughput(
                result)


def test_the_onnx_page_reads_each_amd_hosts_int8_floor_as_the_committed_runs_show():
    """docs/onnx.md says the Zen 2 host's (family 23 model 49) int8 matrix products run no faster than its float32
    ones while the AMD host at the top gained from int8 weights (the two differ, hence the CPU generation in
    provenance): red when a re-run of either file, or one on another host, no longer shows that, so the prose is
    re-read."""
    import perf_onnx
    from pages import performance

    def floor_gain(result):
        return [cell["variants"][perf_onnx.FLOORS["onnx-int8"]]["texts_per_s"]
                / cell["variants"][perf_onnx.FLOORS["onnx"]]["texts_per_s"] for cell in result["throughput"]]

    zen2, top = (json.loads((performance.RESULTS / name).read_text()) for name in ("onnx-zen2.json", "onnx.json"))
    assert all(gain < 1.05 for gain in floor_gain(zen2)) and all(gain > 1.5 for gain in floor_gain(top))
    embeds = [json.loads(path.read_text()) for path in performance.RESULTS.glob("embed-4dade0b-*.json")]
    assert len(embeds) == 4  # docs/performance.md's Zen 2 heading names these four runs' host
    assert all("family 23 model 49" in data["machine"]["cpu"] for data in embeds)
    assert "family 23 model 49" in zen2["provenance"]["cpu"]


def test_the_onnx_page_reads_the_zen4_host_as_its_run_shows():
    """docs/onnx.md's Zen 4 section says: int8 products run several times faster than float32 ones there; onnx-int8
    meets its target and onnx misses it, with the float32 graph's ops other than its weight products over the margin
    the target leaves above the floor; OpenVINO's vectors are further from torch's than on the Zen 2, its CPU having
    AVX512-BF16 where the Zen 2 has none. Red when a re-run no longer shows one of these, so that the prose is
    re-read."""
    import perf_onnx
    from pages import performance

    zen4, zen2 = (json.loads((performance.RESULTS / name).read_text()) for name in ("onnx-zen4.json", "onnx-zen2.json"))
    assert "family 25 model 17" in zen4["provenance"]["cpu"] and "avx512_bf16" in zen4["provenance"]["cpu"]
    assert "avx512_bf16" not in zen2["provenance"]["cpu"]
    rates = [{name: v["texts_per_s"] for name, v in cell["variants"].items()} for cell in zen4["throughput"]]
    assert all(r[perf_onnx.FLOORS["onnx-int8"]] / r[perf_onnx.FLOORS["onnx"]] > 2 for r in rates)
    default = max(zen4["throughput"], key=lambda cell: cell["threads"])["variants"]
    assert default["poolkit onnx-int8"]["vs_st"] >= perf_onnx.TARGETS["onnx-int8"]
    assert default["poolkit onnx"]["vs_st"] < perf_onnx.TARGETS["onnx"]
    assert "more than that margin, so this graph misses the target" in perf_onnx.render_profile(zen4).split("\n\n")[-2]
    peer = "sentence-transformers backend='openvino'"
    diffs = [[cell["peers"][peer]["max_abs_diff_to_st_torch"] for cell in run["throughput"]] for run in (zen4, zen2)]
    assert min(diffs[0]) > 1e-4 > 1e-5 > max(diffs[1])


def test_the_onnx_page_reads_openvino_in_float32_and_in_bf16_as_the_zen4_rerun_shows():
    """docs/onnx.md: on the Zen 4, at both thread counts, onnx is faster than OpenVINO held to float32 and slower than
    OpenVINO as users get it, which computes in bf16 there; onnx-int8 is faster than both. Red when a re-run reads
    otherwise (or a peer row computed in another precision), so that the prose is re-read."""
    from pages import performance

    run = json.loads((performance.RESULTS / "onnx-zen4-peers.json").read_text())
    default, held = "sentence-transformers backend='openvino'", "sentence-transformers backend='openvino', float32"
    assert sorted(cell["threads"] for cell in run["throughput"]) == [1, 2]
    for cell in run["throughput"]:
        assert cell["peers"][default]["computes_in"] == "bf16" and cell["peers"][held]["computes_in"] == "f32"
        rate = {name: v["texts_per_s"] for name, v in cell["variants"].items()}
        assert rate[held] < rate["poolkit onnx"] < rate[default] < rate["poolkit onnx-int8"]


def test_every_committed_run_finds_poolkits_onnxruntime_sessions_faster_than_the_defaults():
    """poolkit's CPU sessions leave out onnxruntime's SkipLayerNormFusion (onnx_graph.DISABLED_OPTIMIZERS) because
    every committed run of perf_onnx's fusions part finds passes faster without it, float32 and int8, at one thread and
    at the default: red when a run (on another CPU) finds a cell where the defaults win, so that the choice is
    revisited, and when the choice is changed without a run that measured it."""
    from pages import performance
    from poolkit.models import onnx_graph

    runs = [json.loads(path.read_text()) for path in sorted(performance.RESULTS.glob("onnx*.json"))]
    runs = [run["fusions"] for run in runs if "fusions" in run]
    assert runs and all(found["left_out"] == list(onnx_graph.DISABLED_OPTIMIZERS) for found in runs)
    assert all(row["speedup"] > 1 for found in runs for row in found["rows"])
    for found in runs:
        cells = {(row["graph"], row["threads"]) for row in found["rows"]}
        threads = {t for _, t in cells}
        assert 1 in threads and len(threads) >= 2 and cells == {(g, t) for g in ("float32", "int8") for t in threads}


def test_the_throughput_floor_holds_every_weight_matmul_of_the_encoder_and_runs(tmp_path):
    """The floor graph of perf_onnx: one MatMul per linear layer of the encoder's transformer blocks, the same weight
    shapes (as many weights in all), one into the next on (rows, hidden). Catches a floor missing a layer or a
    projection (it would be faster than any pass can be, and a target read against it wrong) and one that does not
    run in onnxruntime on rows of any count."""
    pytest.importorskip("onnxruntime")
    import onnx
    import onnxruntime
    import perf_onnx
    from transformers import AutoModel
    from tiny_models import tiny_bert_dir

    model = AutoModel.from_pretrained(tiny_bert_dir(tmp_path / "bert", hidden=32))
    linear = [m.weight for m in model.encoder.modules() if isinstance(m, torch.nn.Linear)]
    perf_onnx.linear_layers_graph(model.config, tmp_path / "floor.onnx")
    graph = onnx.load(str(tmp_path / "floor.onnx")).graph
    assert [n.op_type for n in graph.node] == ["MatMul"] * len(linear)
    assert sorted(tuple(w.dims) for w in graph.initializer) == sorted(tuple(w.T.shape) for w in linear)
    session = onnxruntime.InferenceSession(str(tmp_path / "floor.onnx"), providers=["CPUExecutionProvider"])
    for rows in (1, 7):
        [out] = session.run(None, {"x": np.ones((rows, 32), np.float32)})
        assert out.shape == (rows, 32) and np.isfinite(out).all()


def test_the_profile_reads_a_target_as_missed_where_the_ops_beside_the_products_exceed_its_margin_over_the_floor():
    """perf_onnx's reading of onnxruntime's profile: at the profile's thread count, a target's pass time (sentence-
    transformers' ms / the target) less the backend's floor is the margin; the graph's ops that are not matrix products
    apart from the products by a weight (int8 ones included) must fit in it, the attention's products among them.
    Catches the margin taken from another thread count's cell, the attention's products counted as floor work, the
    weights' counted as the other ops, the verdict inverted."""
    import perf_onnx

    def cell(threads, st_ms):
        ms = {perf_onnx.ST: st_ms, perf_onnx.FLOORS["onnx"]: 400.0, perf_onnx.FLOORS["onnx-int8"]: 300.0}
        return {"threads": threads, "variants": {name: {"ms": value} for name, value in ms.items()}}

    weights = perf_onnx.WEIGHTS
    profile = {"threads": 2, "passes": 3, "ms_per_pass": {
        "float32": {"MatMul" + weights: 420.0, "FusedMatMul": 20.0, "MatMul": 10.0, "SkipLayerNormalization": 30.0,
                    "Transpose": 30.0},
        "int8": {"DynamicQuantizeMatMul" + weights: 250.0, "MatMulIntegerToFloat" + weights: 60.0, "Gelu": 20.0,
                 "Softmax": 5.0}}}
    # 2 threads: ST 1000 ms -> onnx at 2x: 500 ms, margin 100 over the floor; other ops (the attention's products
    # among them) 90: within. int8 at 3x: 333 ms, margin 33; other ops 25: within. At 1 thread (ST 2000 ms) the
    # margins would be 600 / 367.
    text = perf_onnx.render_profile({"throughput": [cell(1, 2000.0), cell(2, 1000.0)], "profile": profile})
    assert "a pass at the target 2x takes 500 ms, 100 ms more than the linear layers' floor; the float32 graph's ops "\
        "other than its products by a weight take 90 ms per pass: within that margin" in text
    assert "a pass at the target 3x takes 333 ms, 33 ms more than the linear layers' floor; the int8 graph's ops "\
        "other than its products by a weight take 25 ms per pass: within that margin" in text
    profile["ms_per_pass"]["float32"]["FusedMatMul"] = 40.0
    text = perf_onnx.render_profile({"throughput": [cell(1, 2000.0), cell(2, 1000.0)], "profile": profile})
    assert "take 110 ms per pass: more than that margin, so this graph misses the target" in text
    text = perf_onnx.render_profile({"throughput": [cell(1, 2000.0), cell(2, 850.0)], "profile": profile})
    assert "a pass at the target 3x takes 283 ms, less than the linear layers' floor (300 ms): beyond" in text
    assert re.search(r"\| SkipLayerNormalization +\| 30 ", text) and re.search(r"\| MatMul \(weights\) +\| 420 ", text)


def test_every_committed_run_finds_onnxscripts_rewrite_no_faster_than_the_shipped_graph():
    """docs/onnx.md reads the rewrites part as: onnxscript's optimize_for_ort rewrite (packed-QKV Attention,
    SkipLayerNormalization, BiasGelu) faster in every repeat in no cell, its int8 copy slower in every repeat at every
    thread count (its Attention ops left unquantised by onnxruntime's quantiser), so poolkit ships the graph as
    exported. Red when a committed run (another CPU, another onnxscript)
    finds a cell where the rewrite wins throughout, or its int8 copy not slower, so that the page and the choice are
    revisited; and when a run lacks a graph or the one-thread cells."""
    from pages import performance

    runs = [json.loads(path.read_text()) for path in sorted(performance.RESULTS.glob("onnx*.json"))]
    runs = [run["rewrites"] for run in runs if "rewrites" in run]
    assert runs
    for found in runs:
        assert found["made"].get("attention", 0) > 0  # the rewrite did fuse the attention
        cells = {(row["graph"], row["threads"]) for row in found["rows"]}
        threads = {t for _, t in cells}
        assert 1 in threads and cells == {(g, t) for g in ("float32", "int8") for t in threads}
        assert not any(all(v > 1 for v in row["per_repeat"]) for row in found["rows"])
        assert all(v < 1 for row in found["rows"] if row["graph"] == "int8" for v in row["per_repeat"])
        # the page's reading of the int8 copy: every Attention op left unquantised (no QAttention)
        assert found["int8_ops"].get("QAttention", 0) == 0
        assert found["int8_ops"]["Attention"] == found["made"]["attention"]


def test_poolkits_onnxruntime_sessions_wait_without_spinning_as_every_committed_run_backs():
    """poolkit's CPU sessions make onnxruntime's intra-op threads wait for work without spinning
    (onnx_graph.SESSION_CONFIG) because, in every committed run of perf_onnx's spinning part, waiting costs no cell's
    median more than 5% on a quiet machine and is faster in both graphs at two threads or more beside busy processes
    (docs/onnx.md reads the runs so). Red when a run (on another CPU) finds otherwise, so that the choice is revisited,
    when the choice is changed without a run that measured it, and when quiet or busy runs are missing."""
    import perf_onnx
    from pages import performance
    from poolkit.models import onnx_graph

    assert onnx_graph.SESSION_CONFIG == {perf_onnx.SPINNING: "0"}
    runs = [json.loads(path.read_text()) for path in sorted(performance.RESULTS.glob("onnx*.json"))]
    runs = [run for run in runs if "spinning" in run]
    quiet = [run["spinning"]["rows"] for run in runs if not run["background"]]
    busy = [run["spinning"]["rows"] for run in runs if run["background"]]
    assert quiet and busy
    for rows in quiet + busy:
        cells = {(row["graph"], row["threads"]) for row in rows}
        threads = {t for _, t in cells}
        assert 1 in threads and len(threads) >= 2 and cells == {(g, t) for g in ("float32", "int8") for t in threads}
    assert all(row["speedup"] >= 1 / 1.05 for rows in quiet for row in rows)
    assert all(row["speedup"] > 1 for rows in busy for row in rows if row["threads"] > 1)


def test_the_cli_s_openmp_wait_policy_is_backed_by_every_committed_run():
    """The ``poolkit`` command runs torch's OpenMP threads with OMP_WAIT_POLICY=PASSIVE (poolkit/cli/__init__.py)
    because, in every committed run of perf_wait_policy, no thread count's median is more than 5% slower with it,
    quiet or beside busy processes, and beside busy processes it is faster at two threads or more (docs/performance.md
    reads the runs so). Red when a run (on another CPU) finds otherwise, so that the choice is revisited, and when
    quiet or busy runs, or either thread count, are missing."""
    from pages import performance

    runs = [json.loads(path.read_text()) for path in sorted(performance.RESULTS.glob("wait-policy*.json"))]
    threads = [{row["threads"] for row in run["rows"]} for run in runs]
    assert all(run["kind"] == "wait_policy" for run in runs) and all(1 in t and len(t) >= 2 for t in threads)
    quiet = [run["rows"] for run in runs if not run["background"]]
    busy = [run["rows"] for run in runs if run["background"]]
    assert quiet and busy
    assert all(row["speedup"] >= 1 / 1.05 for rows in quiet + busy for row in rows)
    assert all(row["speedup"] > 1 for rows in busy for row in rows if row["threads"] > 1)
    # the page also says that beside busy processes at one thread PASSIVE was slower in every repeat
    assert all(v < 1 for rows in busy for row in rows if row["threads"] == 1 for v in row["per_repeat"])
    assert all(row["max_abs_diff"] == 0 for rows in quiet + busy for row in rows)  # the same computation


def test_paired_passes_names_each_session_and_reads_the_ratio_first_over_second(monkeypatch):
    """perf_onnx's paired parts (fusions, rewrites, spinning) read every ratio as first / second, over 1 where the
    second session is faster. Catches the names swapped between the columns, the ratio inverted, a thread count left
    out and the vectors' difference not taken between the pair."""
    import time

    import perf_onnx

    monkeypatch.setattr(perf_onnx, "sorted_encode", lambda encoder, session, texts: session())

    def slow():
        time.sleep(0.02)
        return torch.zeros(2, 3)

    rows = perf_onnx.paired_passes(None, [], 2, lambda: {"g": (slow, lambda: torch.ones(2, 3))}, ("a", "b"))
    assert [r["threads"] for r in rows] == sorted({1, perf_onnx.DEFAULT_THREADS})
    for row in rows:
        assert row["graph"] == "g" and row["a_ms"] > row["b_ms"] and row["speedup"] > 1
        assert len(row["per_repeat"]) == 2 and row["max_abs_diff"] == 1.0


def test_perf_onnx_refuses_an_unknown_part_before_any_work_and_renders_only_the_parts_it_measured(capsys, monkeypatch):
    """``--parts`` names what a run measures (a busy run: the throughput alone). Catches an unknown part accepted (a
    run that measures nothing asked for) or refused only after the busy processes and exports started, and a run's
    text rendering a part it did not measure (a KeyError at the end of a long run)."""
    import perf_onnx

    monkeypatch.setattr(perf_onnx, "real_texts", lambda count: pytest.fail("work started before the options' check"))
    with pytest.raises(SystemExit) as exit_:
        perf_onnx.main(["--parts", "throughput,speed", "--background", "1"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert ("--parts: unknown speed: choose from throughput, cost, agreement, trace, profile, fusions, rewrites, "
            "spinning, int8") in error
    measured = {"parts": ["agreement"], "texts": 3, "agreement": [
        {"pooler": "mean", "max_abs_diff": 2e-6, "lowest_cosine": 0.9999999}]}
    assert perf_onnx.render(measured) == perf_onnx.render_agreement(measured)


def test_the_openvino_peer_is_held_to_float32_only_where_asked():
    """OpenVINO's CPU plugin computes in bf16 on CPUs with native bf16 unless its precision hint says f32: the
    float32 peer row must carry the hint, the default row must not, and each threads setting is kept. Catches both
    rows running the same configuration (a float32 row that is bf16 on such CPUs)."""
    import perf_onnx
    import st_peer_worker

    assert st_peer_worker.model_options("openvino", 2) == {"ov_config": {"INFERENCE_NUM_THREADS": 2}}
    assert st_peer_worker.model_options("openvino", 1, "f32") == {
        "ov_config": {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"}}
    assert st_peer_worker.model_options("torch", 1, "f32") == {}
    assert sorted(precision for *_, precision in perf_onnx.PEERS.values()) == ["default", "f32"]


def test_a_peer_worker_encodes_in_its_own_process_what_sentence_transformers_encodes_here(tmp_path, monkeypatch):
    """perf_onnx's PeerWorker driving st_peer_worker.py (here: this environment's python, sentence-transformers' torch
    backend, a tiny model): the vectors it saves are sentence-transformers' own for the texts, in their order, after
    timed passes; a worker that cannot start, or that dies during the timed passes, is reported with its own error
    line, and a peer whose environment is missing (not built to its end) with the command that builds it. Catches
    vectors of other texts or in another order, a reply read before the work is done, a library's print on stdout
    read as a reply (no redirect), a peer that fails to start or during the timed passes and aborts the run (or keeps
    its times) instead of being named in the table's note."""
    from importlib import metadata

    import perf_onnx
    from sentence_transformers import SentenceTransformer
    from tiny_models import tiny_bert_dir

    model = tiny_bert_dir(tmp_path / "bert", hidden=32)
    texts = ["a b c d e f", "b", "", "c d e"]
    texts_file = tmp_path / "texts.json"
    texts_file.write_text(json.dumps(texts))
    expected = SentenceTransformer(model, device="cpu").encode(texts)
    # A library that prints on stdout while the worker loads (here: a sitecustomize that prints once
    # sentence_transformers is imported) must not break the replies.
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import builtins\n_import = builtins.__import__\n"
        "def noisy(name, *args, **kwargs):\n"
        "    module = _import(name, *args, **kwargs)\n"
        "    if name == 'sentence_transformers' and not getattr(builtins, 'noisy_done', False):\n"
        "        builtins.noisy_done = True\n"
        "        print('a load report on stdout', flush=True)\n"
        "    return module\n"
        "builtins.__import__ = noisy\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    workers = {name: perf_onnx.PeerWorker(Path(sys.executable), "torch", 1, texts_file, model=model,
                                          precision="f32")  # passed on (torch computes in float32 anyway)
               for name in ("healthy", "killed")}
    try:
        workers["killed"].process.kill()
        for worker in workers.values():
            worker()
            worker()  # the killed one's second call returns at once
        times = {name: [1.0] for name in (*workers, "other")}
        peers, failed = perf_onnx.peer_agreement(workers, times, expected, tmp_path / "vectors.npy")
        workers["healthy"].log.seek(0)
        assert "a load report on stdout" in workers["healthy"].log.read()  # printed, and sent to stderr
    finally:
        for worker in workers.values():
            worker.close()
    assert np.load(tmp_path / "vectors.npy").shape == expected.shape
    assert peers["healthy"]["max_abs_diff_to_st_torch"] < 1e-5
    assert peers["healthy"]["versions"]["sentence-transformers"] == metadata.version("sentence-transformers")
    assert peers["healthy"]["computes_in"] == "f32"  # what the worker reports torch computes in
    assert set(peers) == {"healthy"} and set(times) == {"healthy", "other"}
    assert set(failed) == {"killed"} and failed["killed"].startswith("failed during its passes: ")
    with pytest.raises(RuntimeError, match="invalid choice: 'no-such-backend'"):
        perf_onnx.PeerWorker(Path(sys.executable), "no-such-backend", 1, texts_file, model=model)
    python = tmp_path / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)  # built, but not to its end: no .installed
    monkeypatch.setattr(perf_onnx, "ROOT", tmp_path)
    monkeypatch.setattr(perf_onnx, "PEERS", {"peer": ("openvino", python, "make st-openvino", "default")})
    with perf_onnx.ExitStack() as stack:
        assert perf_onnx.start_peers(texts_file, 1, stack) == (
            {}, {"peer": "its environment (env) is missing: `make st-openvino`"})
    (tmp_path / "env" / ".installed").touch()
    monkeypatch.setattr(perf_onnx, "PEERS", {"peer": ("no-such-backend", python, "make st-openvino", "default")})
    with perf_onnx.ExitStack() as stack:
        workers, not_run = perf_onnx.start_peers(texts_file, 1, stack)
    assert workers == {} and "invalid choice: 'no-such-backend'" in not_run["peer"]


def test_background_starts_that_many_busy_processes_and_stops_them():
    # catches a --background that starts nothing (a "loaded" table measured on a quiet machine) or leaves spinners
    import psutil

    before = {child.pid for child in psutil.Process().children()}
    busy = perf_common.start_background(2)
    assert len(busy) == 2 and all(process.poll() is None for process in busy)
    assert {process.pid for process in busy} <= {child.pid for child in psutil.Process().children()} - before
    deadline = time.monotonic() + 30  # on a loaded machine a spinner may wait for a core a while
    while time.monotonic() < deadline and not all(psutil.Process(p.pid).cpu_times().user > 0.1 for p in busy):
        time.sleep(0.1)
    assert all(psutil.Process(process.pid).cpu_times().user > 0.1 for process in busy)  # spinning, not idle
    for process in busy:
        process.kill()
        process.wait(timeout=10)
    with pytest.raises(SystemExit, match="--background"):
        perf_common.start_background(-1)


def test_background_processes_stop_when_the_benchmark_is_killed():
    # catches spinners left running after a benchmark dies by a signal (no exit handler runs then)
    import subprocess

    import psutil

    code = ("import sys, time; sys.path.insert(0, 'benchmarks'); import perf_common\n"
            "busy = perf_common.start_background(1); print(busy[0].pid, flush=True); time.sleep(60)")
    bench = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             cwd=Path(perf_common.__file__).resolve().parents[1])
    spinner = psutil.Process(int(bench.stdout.readline()))
    bench.kill()
    bench.wait(timeout=10)
    spinner.wait(timeout=10)  # psutil.TimeoutExpired if it kept spinning


@pytest.mark.parametrize("reduction,dtypes,batched,short_picks,long_picks", [
    ("max", ("fp32", "bf16"), "index_reduce", [False, False], [False, True]),
    ("sum", ("bf16", "fp16"), "float32 copy", [False, False], [True, True]),
    ("bag", ("fp32",), "product", [False], [True]),
    ("half_bag", ("bf16", "fp16"), "float32 sum", [True, True], [True, True])])
def test_the_row_slices_sweep_times_both_forms_and_marks_the_rules_pick(monkeypatch, reduction, dtypes, batched,
                                                                        short_picks, long_picks):
    """A tiny sweep of each reduction: one row per (B, D, T, dtype), the rule's pick recorded as the reduction's rule
    gives it for the inputs, the two forms' outputs checked to agree, the table marking (*) exactly the picked cells and the
    rule's groups named after the batched form."""
    import perf_row_slices

    from poolkit.pooling import fast

    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(fast, "ROW_SUM_ELEMENTS", 64 * 8)  # the sum's rule by elements, at this tiny width
    monkeypatch.setattr(fast, "BAG_SUM_ELEMENTS", 2 * 64 * 8)  # the bag's, over the batch of 2
    rows = perf_row_slices.sweep(torch.device("cpu"), 1, batches=(2,), widths=(8,), lengths=(4, 200),
                                 reduction=reduction)
    rule = perf_row_slices.REDUCTIONS[reduction].rule
    assert [(r["T"], r["dtype"]) for r in rows] == [(t, dtype) for t in (4, 200) for dtype in dtypes]
    for r in rows:
        x, mask = perf_row_slices.inputs(r["B"], r["T"], r["D"], perf_common.DTYPES[r["dtype"]])
        assert r["rule_picks_slices"] == rule(x, mask) and r["tokens"] == int(mask.sum()) / 2
        assert len(r["per_repeat"]) == 1 and set(r["ms"]) == {batched, "row slices"}
    assert [r["rule_picks_slices"] for r in rows] == short_picks + long_picks  # one thread
    if reduction == "half_bag":  # its own batches, a row of one among them
        assert [r["B"] for r in perf_row_slices.sweep(torch.device("cpu"), 1, widths=(8,), lengths=(4,),
                                                      reduction=reduction)] == [1, 1, 8, 8, 32, 32, 128, 128]
    result = {"settings": {"lengths": (4, 200), **perf_row_slices.REDUCTIONS[reduction].settings(), "threads": 1,
                           "reduction": reduction}, "rows": rows}
    text = perf_row_slices.render(result)
    assert text.count(" *") == sum(short_picks + long_picks)
    short = " \\*" if short_picks[-1] else ""
    assert re.search(rf"\| {dtypes[-1]} +\| 2 +\| 8 +\| \d+\.\d\d{short} +\| \d+\.\d\d \* \|", text)
    rule = perf_row_slices.render_rule([result])
    assert rule.startswith("1 torch thread(s):") and (f"| {batched} kept: short rows |" in rule) != all(short_picks)
    assert f"; {batched} / row slices: median" in rule


def test_rule_checks_back_a_form_only_where_its_cells_favour_it_in_every_sweep():
    """Catches a check that backs the row slices where they lose in one sweep (the busy one), keeps index_reduce for
    short rows where the slices are faster, or keeps it for long rows where the slices are faster in every sweep;
    at a thread count where no cell is picked (the size decides nothing), one that asks the short rows for more than
    the long rows' check, or less; and one that counts an even cell (within TIE of 1) as a win for the row slices."""
    import perf_row_slices

    def sweep(picked, short, long):
        rows = ([{"rule_picks_slices": True, "tokens": 100, "speedup": s} for s in picked]
                + [{"rule_picks_slices": False, "tokens": 10, "speedup": s} for s in short]
                + [{"rule_picks_slices": False, "tokens": 100, "speedup": s} for s in long])
        return {"settings": {"row_slice_tokens": 64}, "rows": rows}

    def backed(*sweeps):
        return {name: ok for name, _, ok in perf_row_slices.rule_checks(list(sweeps))}

    quiet = sweep([1.2, 1.3, 1.1, 0.9], [0.5, 0.6, 0.7, 1.1], [1.2, 1.3, 1.4, 1.5])
    busy = sweep([1.2, 1.3, 1.1, 0.9], [0.5, 0.6, 0.7, 1.1], [0.2, 1.3, 0.1, 1.5])
    assert set(backed(quiet, busy).values()) == {True}
    assert backed(quiet)["index_reduce kept: long rows"] is False  # faster with slices in every sweep given
    assert backed(quiet, sweep([1.2, 0.9], [0.5], [1.0]))["row slices picked"] is False  # half lose in one sweep
    assert backed(quiet, sweep([1.2], [0.5, 1.2], [1.0]))["index_reduce kept: short rows"] is False
    shown = {name: cells for name, cells, _ in perf_row_slices.rule_checks([quiet, sweep([1.2], [], [0.2])])}
    assert shown["index_reduce kept: short rows"][1] == "no cells"  # a column per sweep, none left out
    assert backed(quiet, sweep([1.2], [], [0.2]))["index_reduce kept: short rows"] is False
    unsized = sweep([], [0.5, 0.6, 1.1, 1.2], [1.2, 0.9])  # no cell picked: the short rows take the weak check
    assert backed(unsized)["index_reduce kept: short rows"] is True
    assert backed(unsized, sweep([], [1.1, 1.2, 1.3, 0.9], [0.9]))["index_reduce kept: short rows"] is True
    assert backed(sweep([], [1.1, 1.2, 1.3, 0.9], [0.9]))["index_reduce kept: short rows"] is False
    # within perf_row_slices.TIE of 1 a cell is even: it backs no pick, and it leaves the batched form where it runs
    even = 1 + perf_row_slices.TIE / 2
    assert backed(sweep([even, even, 1.3, 1.4], [0.5], [1.0]))["row slices picked"] is False
    assert backed(sweep([1.2], [even, even, even, 1.3], [1.0]))["index_reduce kept: short rows"] is True
    assert backed(sweep([], [0.5], [even, even, 1.2, 1.3]))["index_reduce kept: long rows"] is True


@pytest.mark.parametrize("prefix", ["max-rows-", "sum-rows-", "bag-rows-", "half-bag-rows-", "query-rows-",
                                    "query-train-rows-"])
def test_the_committed_sweeps_back_the_rule_the_code_runs(monkeypatch, prefix):
    """The committed sweeps of each reduction (the masked max's, the half-precision sum's, the float32 mean's, sum
    pooling's half-precision output's, the half-precision query read's without and with gradients), quiet and beside
    busy processes at one and at two threads, back each group of their cells, and record the pick that the reduction's
    rule (fast.slices_pay, fast.row_sums_pay, fast.bag_sums_pay, fast.half_bag_sums_pay, fast.query_blocks_pay) makes
    today at the sweep's thread count: a rule changed without new sweeps, or sweeps that contradict it, are red."""
    import perf_row_slices
    from pages import performance

    from poolkit.pooling import fast

    sweeps = [json.loads((performance.RESULTS / name).read_text()) for name in performance.FILES
              if name.startswith(prefix)]
    conditions = {(s["settings"]["threads"], bool(s["settings"]["background"])) for s in sweeps}
    assert conditions == {(1, False), (1, True), (2, False), (2, True)}
    for threads in (1, 2):
        at = [s for s in sweeps if s["settings"]["threads"] == threads]
        assert all(ok for _, _, ok in perf_row_slices.rule_checks(at)), threads
    for result in sweeps:
        monkeypatch.setattr(torch, "get_num_threads", lambda: result["settings"]["threads"])
        rule = perf_row_slices.reduction_of(result).rule
        for r in result["rows"]:
            x = torch.empty(r["B"], r["T"], r["D"], dtype=perf_common.DTYPES[r["dtype"]])  # contiguous, never filled
            mask = torch.zeros(r["B"] * r["T"], dtype=torch.bool)
            mask[:round(r["tokens"] * r["B"])] = True
            assert rule(x, mask.view(r["B"], r["T"])) == r["rule_picks_slices"], r


def test_the_tried_loop_threads_sweeps_read_as_the_page_says():
    """docs/performance.md's reading of 07ec403's sweeps (the compiled loops on torch's threads, tried and reverted), for
    each of the three loops: at two threads, quiet, the threads over TIE faster in most of the cells the rule picked;
    beside two busy processes in less than half; so the rule's checks do not back it. Catches the page's reading kept
    after its files change, and a check that would have backed the reverted rule."""
    import perf_row_slices
    from pages import performance

    for name in ("mean", "max", "spread"):
        quiet, busy = runs = [json.loads((performance.RESULTS / f"tried-loop-{name}-rows-07ec403-{condition}.json")
                                         .read_text()) for condition in ("t2", "t2-busy2")]
        assert [(r["settings"]["threads"], r["settings"]["background"]) for r in runs] == [(2, 0), (2, 2)]
        shares = []
        for run in runs:
            picked = [r["speedup"] for r in run["rows"] if r["rule_picks_slices"]]
            assert picked, name
            shares.append(sum(s > 1 + perf_row_slices.TIE for s in picked) / len(picked))
        assert shares[0] > 0.5 > shares[1], (name, shares)
        assert {group: ok for group, _, ok in perf_row_slices.rule_checks(runs)}["row slices picked"] is False


def test_the_fused_activation_reading_holds_for_its_runs():
    """docs/performance.md's reading of 2f51b10 against 0810145 (the attention family's bf16 activation inside its
    product), four runs: faster by over 5% in every run exactly in each pooler's bf16 forward at T128 and
    attention_head's at T512, slower in every run nowhere. Catches the page's reading kept after its files change."""
    from pages import performance

    runs = [json.loads((performance.RESULTS / f"revisions-2f51b10-fused-{c}.json").read_text())
            for c in ("t1", "t2", "t1-busy2", "t2-busy2")]
    assert {(r["settings"]["threads"], r["settings"]["background"]) for r in runs} == {(1, 0), (2, 0), (1, 2), (2, 2)}
    faster, slower = set(), set()
    for name in runs[0]["settings"]["poolers"]:
        for row in runs[0]["rows"]:
            label = performance.config_label(row)
            values = [next(r for r in run["rows"] if performance.config_label(r) == label)["speedup"][name]
                      for run in runs]
            if all(round(v, 2) > 1 + performance.THRESHOLD for v in values):
                faster.add((name, label))
            if all(round(v, 2) < 1 - performance.THRESHOLD for v in values):
                slower.add((name, label))
    assert faster == {(name, "T128 D384 bf16 fwd") for name in runs[0]["settings"]["poolers"]} | {
        ("attention_head", "T512 D768 bf16 fwd")}
    assert slower == set()


def test_no_committed_run_has_a_cell_where_the_plain_forms_win_at_one_thread_count(tmp_path):
    """The code runs the fast forms on every eager-CPU call at any thread count (fast.active); that rule holds only
    while no cell of a pooler's newest runs at one thread count has the plain form faster in every run. A run
    that shows one is caught (and named in the page's rule block)."""
    from pages import performance

    files = [performance.RESULTS / name for name in performance.FILES]
    faster = performance.plain_faster_in_every_run(files)
    assert faster and not any(faster.values())
    for name, runs in performance.newest_runs(files).items():  # every pooler judged at one and at two threads
        assert {data["settings"]["threads"] for _, data in runs} == {1, 2}, name
    newest = performance.newest_runs(files)["max"]
    slower = []
    for path, data in newest:
        for row in data["rows"]:
            if (row["T"], row["dtype"], row["mode"]) == (512, "bf16", "fwd") and data["settings"]["threads"] > 1:
                row["speedup"]["max"] = 0.8
        slower.append(tmp_path / path.name)
        slower[-1].write_text(json.dumps(data))
    found = performance.plain_faster_in_every_run(slower + [f for f in files if f not in [p for p, _ in newest]])
    assert [cell.split(" 0.80x")[0] for cell in found[2]] == ["`max` T512 D768 bf16 fwd"]
    assert found[1] == []
    assert "the plain forms faster in every run: `max` T512 D768 bf16 fwd" in performance.rule_block(slower)


def test_the_blocks_sweep_times_every_size_beside_the_plain_form_and_marks_the_pick(monkeypatch):
    """A tiny sweep: a row per (pooler, shape, dtype, mode) with a ratio per block size and the plain form's time; each
    size is what block_bytes answers while its variant runs (the named bytes, or each form's own one-thread size),
    restored after; the pick is block_bytes' at the thread count (the one-thread sizes on one thread) and marked."""
    import perf_blocks

    from poolkit.pooling import fast

    wired, sized = [], perf_blocks.sized
    monkeypatch.setattr(perf_blocks, "sized", lambda call, size: wired.append(size) or sized(call, size))
    rows = perf_blocks.sweep(torch.device("cpu"), 1, cases=[("attention", ("fp32",)), ("mean", ("bf16",))],
                             shapes=[(8, 16)])
    assert wired == list(perf_blocks.SIZES.values()) * len(rows)  # every variant gets its own size
    assert [(r["pooler"], r["mode"]) for r in rows] == [("attention", "fwd"), ("attention", "fwd+bwd"),
                                                        ("mean", "fwd"), ("mean", "fwd+bwd")]
    assert all(set(r["speedup"]) == set(perf_blocks.SIZES) and set(r["ms"]) == {"plain", *perf_blocks.SIZES}
               for r in rows)
    chosen = fast.block_bytes
    for size in (8 << 20, None):
        got = []
        perf_blocks.sized(lambda: got.append(fast.block_bytes(123)), size)()
        assert got == [size or 123] and fast.block_bytes is chosen  # restored after the call
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert perf_blocks.picked() == "cache"
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert perf_blocks.SIZES[perf_blocks.picked()] == fast.THREADED_BLOCK_BYTES
    result = {"settings": {"sizes": list(perf_blocks.SIZES), "picked": "32 MiB", "threads": 2}, "rows": rows}
    text = perf_blocks.render(result)
    assert text.count(" *") == len(rows)
    losing = sum(r["speedup"]["cache"] < 1 for r in rows)
    assert f"`cache` {losing} of {len(rows)} (lowest {min(r['speedup']['cache'] for r in rows):.2f}x)" in text
    assert "| 2 | quiet | attention, mean | `32 MiB` beats the plain form in " in perf_blocks.render_rule([result])


def test_the_blocks_sweep_times_only_the_poolers_asked_for_and_refuses_others_before_any_work(monkeypatch, tmp_path):
    """--poolers narrows the sweep to those cases, and says so in its settings; an unknown name is a usage error
    (exit 2) before any cell is timed. Catches the option ignored, or recorded without narrowing the sweep."""
    import perf_blocks

    swept = []
    row = {"pooler": "mean", "T": 8, "D": 16, "dtype": "bf16", "mode": "fwd", "ms": {"plain": 1.0},
           "speedup": dict.fromkeys(perf_blocks.SIZES, 1.5)}
    monkeypatch.setattr(perf_blocks, "sweep", lambda device, repeats, cases: swept.append(cases) or [row])
    result = perf_blocks.main(["--poolers", "mean_max,mean", "--threads", "0", "--json", str(tmp_path / "sweep.json")])
    assert swept == [[("mean", ("bf16",)), ("mean_max", ("bf16",))]]
    assert result["settings"]["poolers"] == ["mean", "mean_max"]
    assert json.loads((tmp_path / "sweep.json").read_text())["settings"]["poolers"] == ["mean", "mean_max"]
    assert perf_blocks.main(["--threads", "0"])["settings"]["poolers"] == [name for name, _ in perf_blocks.CASES]
    with pytest.raises(SystemExit) as refused:
        perf_blocks.main(["--poolers", "mean,max", "--threads", "0"])
    assert refused.value.code == 2 and len(swept) == 2


def test_block_rule_checks_back_a_pick_only_if_it_beats_the_plain_form_and_no_size_is_much_faster():
    """Catches a check that backs a pick the plain form beats in a busy sweep, one that a much faster size beats on the
    median cell, or one judged on a single sweep's evidence when the other contradicts it."""
    import perf_blocks

    def sweep(cells, pick="32 MiB"):
        return {"settings": {"sizes": ["cache", "32 MiB"], "picked": pick, "threads": 2},
                "rows": [{"speedup": {"cache": c, "32 MiB": b}} for c, b in cells]}

    quiet = sweep([(1.5, 1.4), (2.0, 1.9), (1.2, 1.3), (3.0, 2.8)])
    busy = sweep([(0.3, 1.2), (0.4, 1.1), (0.5, 1.3), (0.2, 1.1)])
    assert perf_blocks.rule_checks([quiet, busy])[1] is True
    assert perf_blocks.rule_checks([quiet, busy])[0][1].startswith("`32 MiB` beats the plain form in 100% of 4")
    assert perf_blocks.rule_checks([busy | {"settings": busy["settings"] | {"picked": "cache"}}])[1] is False
    slow = sweep([(1.5, 1.2), (2.0, 1.6), (1.2, 1.0), (3.0, 2.4)])  # cache 25% faster on the median cell
    assert perf_blocks.rule_checks([slow])[1] is False
    assert perf_blocks.rule_checks([quiet, sweep([(1.2, 0.9), (1.2, 0.8), (1.2, 1.1), (1.2, 0.9)])])[1] is False


def half_copy_sweeps(cpu: str) -> list[dict]:
    """The committed block sweeps of the half copy's cells on the CPU whose provenance names cpu."""
    from pages import performance

    sweeps = [json.loads((performance.RESULTS / name).read_text()) for name in performance.FILES
              if name.startswith("blocks-") and "-half-" in name]
    return [s for s in sweeps if cpu in s["machine"]["cpu"]]


def test_the_committed_half_copy_sweeps_show_why_it_keeps_the_threaded_size():
    """docs/performance.md keeps one threaded size for the half copy because, in its committed sweeps at two threads on
    the Zen 2, every smaller size loses to the plain form in some cell of every busy sweep while the picked size loses
    in none (and 8 or 16 MiB beats it in a T512 cell when quiet). Red when a re-run no longer shows that, so the page's
    reading is re-made."""
    sweeps = half_copy_sweeps("family 23 model 49")
    busy = [s for s in sweeps if s["settings"]["background"]]
    quiet = [s for s in sweeps if not s["settings"]["background"]]
    assert len(busy) >= 2 and quiet and all(s["settings"]["threads"] == 2 for s in sweeps)
    for sweep in busy:
        pick = sweep["settings"]["picked"]
        smaller = [size for size in sweep["settings"]["sizes"][:sweep["settings"]["sizes"].index(pick)]]
        assert smaller and all(min(r["speedup"][size] for r in sweep["rows"]) < 1 for size in smaller)
        assert min(r["speedup"][pick] for r in sweep["rows"]) > 1
    for sweep in quiet:  # 8 or 16 MiB beats the pick in a T512 cell: the quiet gain the page says is given up
        pick = sweep["settings"]["picked"]
        assert any(max(r["speedup"]["8 MiB"], r["speedup"]["16 MiB"]) > r["speedup"][pick]
                   for r in sweep["rows"] if r["T"] == 512)


def test_the_zen4_half_copy_sweeps_read_as_the_page_says():
    """docs/performance.md: on the Zen 4, beside busy processes, the picked size loses to the plain form in some cell of
    each busy sweep, and every smaller size in one busy sweep or more (no size is safe under load there), while the
    pick still beats the plain form in the rule's share of cells in every sweep. Red when a re-run reads otherwise."""
    import perf_blocks

    sweeps = half_copy_sweeps("family 25 model 17")
    busy = [s for s in sweeps if s["settings"]["background"]]
    assert len(busy) >= 2 and len(sweeps) > len(busy) and all(s["settings"]["threads"] == 2 for s in sweeps)
    pick = busy[0]["settings"]["picked"]
    sizes = busy[0]["settings"]["sizes"]
    assert all(min(r["speedup"][pick] for r in s["rows"]) < 1 for s in busy)
    assert all(any(min(r["speedup"][size] for r in s["rows"]) < 1 for s in busy) for size in sizes[:sizes.index(pick)])
    share = perf_blocks.BACKING_SHARE
    assert all(sum(r["speedup"][pick] > 1 for r in s["rows"]) >= share * len(s["rows"]) for s in sweeps)


def test_the_committed_block_sweeps_back_the_sizes_the_code_picks(monkeypatch):
    """The committed block sweeps, quiet and beside busy processes at one and at two threads, back the size they
    picked, that pick is fast.block_bytes' today at the sweep's thread count, and their cache sizes are today's: a
    size changed without new sweeps (the threaded one or either cache size), or sweeps that contradict it, are red."""
    import perf_blocks
    from pages import performance

    from poolkit.pooling import fast

    sweeps = [json.loads((performance.RESULTS / name).read_text()) for name in performance.FILES
              if name.startswith("blocks-")]
    assert {(s["settings"]["threads"], bool(s["settings"]["background"])) for s in sweeps} == {
        (1, False), (1, True), (2, False), (2, True)}
    for threads in (1, 2):
        assert perf_blocks.rule_checks([s for s in sweeps if s["settings"]["threads"] == threads])[1], threads
    for result in sweeps:
        monkeypatch.setattr(torch, "get_num_threads", lambda: result["settings"]["threads"])
        assert perf_blocks.picked() == result["settings"]["picked"]
        assert result["settings"]["cache_bytes"] == {"gather": fast.GATHER_CHUNK_BYTES,
                                                     "half copy": fast.EXACT_BLOCK_BYTES}


def test_where_sorts_profiler_events_into_kinds():
    """Catches an in-place operator lost to "other operators", an autograd node or a custom Function's Python body
    counted as an operator, and an unknown operator given a kind it does not have."""
    import perf_where

    assert perf_where.kind_of("aten::bmm") == "products"
    assert perf_where.kind_of("aten::mul_") == perf_where.kind_of("aten::tanh") == "elementwise"
    assert perf_where.kind_of("aten::_index_put_impl_") == perf_where.kind_of("aten::copy_") == "copies and casts"
    assert perf_where.kind_of("aten::zero_") == "allocation" and perf_where.kind_of("aten::amax") == "reductions"
    assert perf_where.kind_of("aten::frobnicate") == "other operators"
    for event in ("MulBackward0", "autograd::engine::evaluate_function: BmmBackward0", "WeightedSum"):
        assert perf_where.kind_of(event) == perf_where.AUTOGRAD
    named = [name for names in perf_where.KINDS.values() for name in names]
    assert len(named) == len(set(named))  # no operator in two kinds


def test_where_attributes_the_forward_time_without_counting_anything_twice():
    """The shares add up to 1: the contract (forward - pooling), the operators scaled down to the pooling's unprofiled
    time where the profiler made them longer, and what is left outside operators. Catches the profiler's inflated
    operator time taken as is (shares over 1), or the contract left out."""
    import perf_where

    spent = dict.fromkeys(perf_where.COLUMNS[:-1], 0.0) | {"products": 3.0, "elementwise": 1.0}
    shares = perf_where.attribute(spent, pool_ms=8.0, forward_ms=10.0)
    assert shares["contract"] == pytest.approx(0.2) and shares["products"] == pytest.approx(0.3)
    assert shares["outside operators"] == pytest.approx(0.4) and sum(shares.values()) == pytest.approx(1)
    inflated = perf_where.attribute(spent | {"products": 12.0}, pool_ms=8.0, forward_ms=10.0)
    assert inflated["products"] == pytest.approx(0.8 * 12 / 13) and inflated["outside operators"] == 0
    assert sum(inflated.values()) == pytest.approx(1)


def test_where_times_the_pooling_alone_beside_the_call_and_its_floor(monkeypatch, tmp_path):
    """A tiny run: a row per pooler and cell with its floor ratio, the pooling alone agreeing with the call (so it is
    the same work less the checks), operator time found in the kinds that pooler runs (a weighted sum's product, the
    max's reduction), shares adding up to 1; unknown poolers, sizes and dtypes are usage errors before any work.
    Catches the pooling alone timed on other inputs or another function, or a profile that records nothing."""
    import perf_where
    from poolkit.pooling import compiled

    result = perf_where.main(["--sizes", "8x8", "--dtypes", "fp32", "--poolers", "mean,max,attention,latent",
                              "--repeats", "1", "--profiled-calls", "2", "--json", str(tmp_path / "where.json")])
    rows = result["rows"]
    assert [(r["pooler"], r["mode"]) for r in rows] == [(n, m) for m in ("fwd", "fwd+bwd")
                                                        for n in ("mean", "max", "attention", "latent")]
    for r in rows:
        assert r["pool_vs_forward_max_abs_diff"] < 1e-6 and r["ratio"] > 0 and len(r["pool_per_repeat"]) == 1
        compiled_loops = compiled.available() and r["pooler"] in ("max", "mean")
        assert sum(r["shares"].values()) == pytest.approx(1)
        assert r["operator_ms"]["compiled loops" if compiled_loops else "products"] > 0
    assert json.loads((tmp_path / "where.json").read_text())["settings"]["poolers"] == ["mean", "max", "attention",
                                                                                        "latent"]
    text = perf_where.render(result)
    shares = text.partition("Over their target")[0]  # the shares' table, then the cells over their target
    assert shares.count("| T8 D8 fp32 fwd ") == 4 and "| products " in shares and perf_where.over_target(rows) in text
    flagged = perf_where.render({**result, "rows": [{**row, "below_floor": row is rows[0]} for row in rows]})
    flags = [bool(re.search(r"\| \d+\.\d\d ! +\|", line))
             for line in flagged.partition("Over their target")[0].splitlines()]
    assert sum(flags) == 1  # the table pads its columns: a ratio under 10 leaves spaces after the flag
    first = rows[0]  # the profiler's inflation: its operators' time over the pooling's unprofiled time
    assert perf_where.profiled(first) == pytest.approx(sum(first["operator_ms"].values()) / first["pool_ms"])
    [line] = [line for line in shares.splitlines() if line.startswith("| mean ") and "| T8 D8 fp32 fwd " in line]
    assert f"| {perf_where.profiled(first):.2f} " in line
    top = max(rows, key=lambda r: r["shares"]["contract"])
    [largest] = [line for line in text.splitlines() if line.startswith("Each kind at its largest: ")]
    assert f"contract {top['shares']['contract']:.0%} (`{top['pooler']}` T8 D8 fp32 {top['mode']})" in largest
    for bad in (["--poolers", "mean,cls"], ["--sizes", "8"], ["--dtypes", "fp16"]):
        monkeypatch.setattr(perf_where, "measure_cell", lambda *a, **k: pytest.fail("timed before refusing"))
        with pytest.raises(SystemExit) as refused:
            perf_where.main(bad)
        assert refused.value.code == 2


def test_where_takes_perf_tokens_cells_and_repeats_quick_or_full_unless_told(monkeypatch):
    """perf_where's default cells are perf_tokens' own (``--full``: its four (T, D) cells and 9 repeats), so that its
    rows sit beside that run's. Catches ``--full`` ignored, and ``--sizes`` / ``--repeats`` overridden by it."""
    import perf_tokens
    import perf_where

    measured = []
    monkeypatch.setattr(perf_where, "measure_cell", lambda length, dim, dtype, mode, poolers, device, repeats, calls:
                        measured.append((length, dim, repeats)) or [])
    monkeypatch.setattr(perf_where, "render", lambda result: "")
    for argv, cells, repeats in ((["--full"], perf_tokens.grid(True)[0], 9), ([], perf_tokens.grid(False)[0], 7),
                                 (["--full", "--sizes", "8x8", "--repeats", "2"], [(8, 8)], 2)):
        measured.clear()
        result = perf_where.main([*argv, "--dtypes", "fp32", "--poolers", "mean"])
        assert measured == [(t, d, repeats) for t, d in cells for _ in ("fwd", "fwd+bwd")]
        assert result["settings"]["sizes"] == cells and result["settings"]["repeats"] == repeats
    assert len(perf_tokens.grid(True)[0]) == 4


def test_where_reads_each_cell_over_its_target_as_set_by_the_contract_or_by_the_poolings_operators():
    """A cell over its target is the contract's doing only if the pooling alone (the ratio less the contract's share)
    is within it. Catches the split inverted, one family's target used for another (a statistic at 1.25x is within
    its 1.3x), and a largest kind that counts the contract among the operators."""
    import perf_where

    def row(pooler, ratio, contract, **kinds):
        shares = {"products": 0.0, "reductions": 0.0, "elementwise": 0.0, **kinds, "contract": contract}
        return {"pooler": pooler, "T": 8, "D": 4, "dtype": "fp32", "mode": "fwd", "ratio": ratio, "shares": shares}

    rows = [row("mean", 1.5, 0.3, products=0.7), row("mean", 1.25, 0.0, products=1.0),
            row("attention", 1.25, 0.6, products=0.1, elementwise=0.3),
            row("max", 3.0, 0.5, reductions=0.3, elementwise=0.2)]
    text = perf_where.over_target(rows)
    lines = [line for line in text.splitlines() if line.startswith("| mean") or line.startswith("| attention")
             or line.startswith("| max")]
    assert "3 of 4 cells, 1 of them still over it" in text and len(lines) == 3
    assert "1.05" in lines[0] and "the contract (30% of the call)" in lines[0]
    assert "0.50" in lines[1] and "the contract (60% of the call)" in lines[1]
    assert "1.50" in lines[2] and "the pooling (largest: reductions)" in lines[2]
    assert perf_where.over_target(rows[1:2]) == "Over their target: none of the 1 cells"


def test_the_where_readings_on_the_performance_page_hold_for_the_committed_run():
    """docs/performance.md's readings of the where run, checked cell by cell against its file: the max's reduction its
    largest kind in forward, bf16 mean / sum spending more on the float32 copy and its loop than on the product, and
    the x gradient (elementwise) the largest kind beside the products in fp32 forward + backward, and the contract
    putting at most a tenth of the cells over their target, none by more than 5%. Catches a reading the committed run
    does not bear out."""
    from pages import performance

    name = "where-2034ecc-t1.json"  # the run these readings are of (the Zen 4's has its own, below)
    assert name in performance.FILES
    rows = json.loads((performance.RESULTS / name).read_text())["rows"]
    text = performance.PAGE.file().read_text()
    assert "in every forward cell its masked reduction (reductions) is its largest kind" in text
    for r in (r for r in rows if r["pooler"] == "max" and r["mode"] == "fwd"):
        assert max(r["shares"], key=r["shares"].get) == "reductions", r
    halves = [r for r in rows if r["pooler"] in ("mean", "sum") and r["dtype"] == "bf16" and r["mode"] == "fwd"]
    assert halves and all(r["shares"]["copies and casts"] + r["shares"]["autograd and Python functions"]
                          > r["shares"]["products"] for r in halves)
    trained = [r for r in rows if r["pooler"] in ("mean", "sum", "latent", "adapool") and r["dtype"] == "fp32"
               and r["mode"] == "fwd+bwd"]
    assert len(trained) == 8 and all(r["shares"]["elementwise"] == max(v for k, v in r["shares"].items()
                                                                       if k != "products") for r in trained)
    import perf_where

    over = [r for r in rows if r["ratio"] > perf_where.target_of(r["pooler"])]
    by_contract = [r for r in over if perf_where.pool_over_floor(r) <= perf_where.target_of(r["pooler"])]
    assert "The contract puts hardly any cell over its target, and none far over it" in text
    assert len(by_contract) <= len(over) / 10 and all(r["ratio"] <= 1.05 * perf_where.target_of(r["pooler"])
                                                      for r in by_contract)


def test_the_zen4_where_reading_holds_for_its_committed_run():
    """docs/performance.md's reading of the Zen 4's where run: the compiled loops the largest kind of the pooling in
    every forward cell of mean and max. Catches the reading kept after a run in which the loops are not taken (numba
    missing: no such kind) or some torch operator outweighs them."""
    from pages import performance

    rows = json.loads((performance.RESULTS / "where-e00300d-zen4-t1.json").read_text())["rows"]
    text = performance.PAGE.file().read_text()
    assert "`mean` and `max`: in every forward cell the loops are the pooling's largest kind" in text
    forward = [r for r in rows if r["pooler"] in ("mean", "max") and r["mode"] == "fwd"]
    assert len(forward) == 8
    for r in forward:
        pooling = {kind: share for kind, share in r["shares"].items() if kind not in ("floor", "contract")}
        assert max(pooling, key=pooling.get) == "compiled loops", r
