"""README.md's speed claim, rendered from the performance suite's result files: ``poolkit.encode``'s throughput
against sentence-transformers' ``encode`` (``benchmarks/perf_embed.py``, docs/performance.md sections 5 and
"The suite at torch's default thread count") at one torch thread and at torch's default, on a quiet machine and
beside busy processes. Only this block is rendered; the rest of the README is prose and tested code.
"""

from __future__ import annotations

from rendering import Page, read_json

from pages.performance import RESULTS, threads_used

#: The runs the claim reads, a group per machine: run_all result files with an ``embed`` suite, quiet first.
RUNS = [["bench-cpu-quick-snippets-memory-model-model_train-embed.json", "suite-fb1b624-t2.json",
         "suite-fb1b624-t1-busy2.json", "suite-fb1b624-t2-busy2.json"],
        ["embed-4dade0b-t1.json", "embed-4dade0b-t2.json", "embed-4dade0b-t1-busy2.json",
         "embed-4dade0b-t2-busy2.json"]]


def condition(data: dict) -> str:
    """'1 torch thread(s)' / "torch's default, 2 torch threads", and 'beside N busy process(es)' when there were."""
    background = data["options"].get("background", 0)
    return threads_used(data) + (f" beside {background} busy process(es)" if background else ", quiet")


def ratio(speedup: float) -> str:
    """The throughput ratio as the claim words it: '1.24x', or '0.93x (slower)' below 1."""
    return f"{speedup:.2f}x" + (" (slower)" if round(speedup, 2) < 1 else "")


def claim(groups: list[list[dict]]) -> str:
    """One sentence per machine (a group of runs): the ratio of each run (its thread count and load), with its
    per-repeat span."""
    sentences = []
    for runs in groups:
        machines = sorted({data["machine"]["cpu"] for data in runs})
        parts = []
        for data in runs:
            embed = data["suites"]["embed"]
            parts.append(f"{ratio(embed['speedup'])} at {condition(data)} (per repeat {min(embed['per_repeat']):.2f} "
                         f"to {max(embed['per_repeat']):.2f}x)")
        sentences.append(f"on a {runs[0]['machine']['cores']}-core {' / '.join(machines)}: " + "; ".join(parts) + ".")
    first = groups[0][0]["suites"]["embed"]["texts"]
    return ("Throughput against sentence-transformers' `encode` on the same model, texts and batch size "
            f"(`benchmarks/perf_embed.py`, {first} texts; docs/performance.md, section 5), measured "
            + " Measured ".join(sentences))


PAGE = Page("README.md", lambda: {"embedding throughput": claim([[read_json(RESULTS / name) for name in group]
                                                                 for group in RUNS])})
