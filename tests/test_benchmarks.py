"""The performance suite's own machinery: what it times, and the before/after import of an old revision."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import perf_common  # noqa: E402
import perf_revisions  # noqa: E402


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

    result = perf_revisions.main(["--against", "HEAD", "--poolers", "mean,cls", "--repeats", "1", "--threads", "0"])
    assert len(result["rows"]) == 8  # 2 sizes x 2 dtypes x 2 modes
    assert all(r["speedup"]["mean"] > 0 and r["speedup"]["cls"] > 0 for r in result["rows"])


def test_per_repeat_ratios_and_run_info():
    times = {"a": [2.0, 4.0, 9.0], "b": [1.0, 2.0, 3.0]}
    assert perf_common.per_repeat(times, "a", "b") == [2.0, 2.0, 3.0]
    info = perf_common.run_info(torch.device("cpu"))
    assert len(info["commit"]) == 40 and info["torch"] == torch.__version__ and info["machine"]["cores"]
    assert all(not path.startswith(" ") and Path(path).name for path in info["uncommitted"])


@pytest.mark.slow
def test_paths_times_plain_against_fast_forms_and_renders(tmp_path):
    import perf_paths
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import render_perf_tables

    out = tmp_path / "paths.json"
    result = perf_paths.main(["--poolers", "mean,max", "--repeats", "2", "--threads", "0", "--json", str(out)])
    assert len(result["rows"]) == 8 and result["kind"] == "paths"
    for row in result["rows"]:
        assert len(row["per_repeat"]["max"]) == 2 and row["max_abs_diff"]["mean"] < 1e-2
    text = render_perf_tables.render(out, 0.05)
    assert "| max " in text and "T512 D768 bf16 fwd+bwd" in text
    doc = tmp_path / "doc.md"
    doc.write_text("a\n<!-- rendered: paths.json -->\nold\n<!-- end rendered: paths.json -->\nb\n")
    render_perf_tables.write_into(doc, {"paths.json": text})
    assert "old" not in doc.read_text() and text in doc.read_text() and doc.read_text().endswith("b\n")
    assert render_perf_tables.group_name(result) == "agreement: paths"
    both = render_perf_tables.agreement([out, out], 0.05)  # one run twice: every listed cell agrees with itself
    assert "`paths.json` (2 repeats), `paths.json` (2 repeats)" in both
