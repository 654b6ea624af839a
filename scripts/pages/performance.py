"""docs/performance.md's tables, rendered from the performance suite's result files (``FILES``, in
``benchmarks/results/``).

What ``benchmarks/perf_revisions.py --json`` (old time / new time) and ``benchmarks/perf_paths.py --json`` (plain
time / fast time) write gives one block per file, named after it: a table with a pooler per row, a column per
(T, D, dtype, mode), each cell the median over repeats of the per-repeat ratio; under it the run's provenance and
the cells whose median is more than ``THRESHOLD`` away from 1 (either way), each with how many of its repeats fall
on the same side of 1. Several runs of one comparison (the same kind, the same earlier revision or timed tree)
also give an agreement block (``agreement: revisions 55de4ff`` / ``agreement: paths 20a31c2``): the cells beyond
the threshold in the same direction in every run (on a shared machine, a change that one run shows and another
does not is noise; runs at other thread counts or loads agree only where a form wins under all of them). The
plain-vs-fast runs together give ``rule: paths``: per thread count, the cells of each pooler's newest timed tree
whose plain form is faster in every run (:func:`plain_faster_in_every_run`, which a test holds empty: the fast forms
run at every thread count). ``benchmarks/perf_row_slices.py`` sweeps give one cell table each and, together,
``rule: max rows``, ``rule: sum rows``, ``rule: bag rows``, ``rule: half bag rows``, ``rule: query rows``, ``rule:
query train rows`` and ``rule: loop mean rows`` / ``loop max rows`` / ``loop spread rows`` (the masked max's choice
between its two fast forms, the half-precision sum's, the float32 mean's, sum pooling's half-precision output's,
latent / adapool's half-precision read's without and with gradients, and the compiled loops' threads, checked per
thread count); sweeps of a rule that was tried and reverted (file names starting ``TRIED``) record that rule's
picks, not the code's, and give their own ``rule: tried ...`` block instead (``rule: tried query rows``);
``benchmarks/perf_blocks.py`` sweeps likewise give a table each and ``rule: blocks`` (the block size of the blocked
fast forms per thread count). ``benchmarks/perf_where.py`` runs give a table each: where each token pooler's time
goes, beside its floor; ``benchmarks/perf_wait_policy.py`` runs one each: the torch backend's passes with torch's
OpenMP threads spinning or sleeping while they wait.

Token poolers against their floors (``benchmarks/run_all.py``'s JSON, or ``perf_tokens.py --json``) give NAME
(provenance and the family tables, ``perf_tokens.render``) and ``NAME targets`` (``perf_tokens.targets``); spatial
poolers against their floors and timm give ``NAME spatial``; run_all's suites 2-5 give ``NAME run`` (provenance,
each suite's load), ``NAME targets 2-5`` and one block per section (``NAME snippets`` / ``memory`` / ``model``
(with ``model_train``) / ``embed``, each its script's ``render``); ``dynamic_padding.json`` gives ``NAME targets``
(target row 6). A new result file goes into ``FILES`` and its blocks' markers into the page; a block the page marks
that the files no longer give (a suite left out of a re-run) fails ``scripts/docs.py --check``.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime
from pathlib import Path

from rendering import ROOT, Page, read_json, span, table

sys.path.insert(0, str(ROOT / "benchmarks"))

import perf_blocks  # noqa: E402
import perf_embed  # noqa: E402
import perf_row_slices  # noqa: E402
import perf_memory  # noqa: E402
import perf_model  # noqa: E402
import perf_snippets  # noqa: E402
import perf_spatial  # noqa: E402
import perf_tokens  # noqa: E402
import perf_wait_policy  # noqa: E402
import perf_where  # noqa: E402

from pages.benchmarks_compare import provenance as result_provenance  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
#: The result files on the page, in its order.
FILES = ["bench-cpu-quick-tokens.json", "bench-cpu-quick-snippets-memory-model-model_train-embed.json",
         "dynamic_padding.json", "tokens-339f8cf-zen2-t1.json", "tokens-d0f20ee-zen2-t1.json",
         "tokens-c543733-zen2-t1.json", "tokens-5f61f96-zen2-t1.json", "tokens-d19cf7c-zen2-t1.json",
         "tokens-808a3fc-zen2-t1.json", "tokens-edd9513-zen2-t2.json", "tokens-edd9513-zen2-t2-busy2.json",
         "tokens-865e556-zen4-t1.json", "tokens-865e556-zen4-t2.json", "tokens-ccd5e39-zen4-t1.json",
         "tokens-ccd5e39-zen4-t2.json", "tokens-9a2b815-zen4-t1.json",
         "tokens-74f25a2-zen4-t1.json", "tokens-74f25a2-zen4-t2.json", "tokens-74f25a2-zen4-t1-busy2.json",
         "tokens-74f25a2-zen4-t2-busy2.json", "tokens-9f705b3-zen4-t1.json",
         "tokens-9f705b3-zen4-t2.json", "tokens-9f705b3-zen4-t1-busy2.json", "tokens-9f705b3-zen4-t2-busy2.json",
         "tokens-75c1f82-zen4-t1.json", "tokens-75c1f82-zen4-t2.json", "tokens-75c1f82-zen4-t1-busy2.json",
         "tokens-75c1f82-zen4-t2-busy2.json", "tokens-e97be22-zen4-t1.json", "tokens-e97be22-zen4-t2.json",
         "tokens-e97be22-zen4-t1-busy2.json", "tokens-e97be22-zen4-t2-busy2.json",
         "tokens-263001a-zen4-t1.json", "tokens-263001a-zen4-t2.json", "tokens-263001a-zen4-t1-busy2.json",
         "tokens-263001a-zen4-t2-busy2.json",
         "tokens-e8b2e98-zen4-t1.json", "tokens-e8b2e98-zen4-t2.json", "tokens-e8b2e98-zen4-t1-busy2.json",
         "tokens-e8b2e98-zen4-t2-busy2.json", "tokens-e8b2e98-zen4-t2-r2.json",
         "tokens-58e7a07-zen4-t1.json", "tokens-58e7a07-zen4-t2.json", "tokens-58e7a07-zen4-t1-busy2.json",
         "tokens-58e7a07-zen4-t2-busy2.json", "tokens-5e41775-zen4-t1.json", "tokens-5e41775-zen4-t2.json",
         "tokens-5e41775-zen4-t1-busy2.json", "tokens-5e41775-zen4-t2-busy2.json",
         "tokens-2f51b10-zen4-t1.json", "tokens-2f51b10-zen4-t2.json", "tokens-2f51b10-zen4-t1-busy2.json",
         "tokens-2f51b10-zen4-t2-busy2.json", "tokens-13c448a-zen4-t1.json", "tokens-13c448a-zen4-t2.json",
         "tokens-13c448a-zen4-t1-busy2.json", "tokens-13c448a-zen4-t2-busy2.json",
         "where-2034ecc-t1.json", "where-e00300d-zen4-t1.json",
         "embed-4dade0b-t1.json", "embed-4dade0b-t2.json", "embed-4dade0b-t1-busy2.json",
         "embed-4dade0b-t2-busy2.json", "wait-policy-zen4.json", "wait-policy-zen4-busy2.json",
         "bench-cpu-quick-spatial.json", "revisions-55de4ff-head-r11.json",
         "revisions-55de4ff.json", "paths-fast-vs-plain.json", "revisions-cdccd85-nonfinite.json",
         "revisions-6d8be67-padding-t1.json", "revisions-6d8be67-padding-t2.json",
         "revisions-8ae7c06-exact-half-t1.json", "revisions-8ae7c06-exact-half-t2.json",
         "revisions-ce36b4f-half-blocks-t1.json", "revisions-ce36b4f-half-blocks-t2.json",
         "sum-rows-865e556-t1.json", "sum-rows-865e556-t1-busy2.json", "sum-rows-865e556-t2.json",
         "sum-rows-865e556-t2-busy2.json",
         "revisions-865e556-row-sums-t1.json", "revisions-865e556-row-sums-t2.json",
         "query-rows-ccd5e39-t1.json", "query-rows-ccd5e39-t1-busy2.json", "query-rows-ccd5e39-t2.json",
         "query-rows-ccd5e39-t2-busy2.json", "query-train-rows-ccd5e39-t1.json",
         "query-train-rows-ccd5e39-t1-busy2.json", "query-train-rows-ccd5e39-t2.json",
         "query-train-rows-ccd5e39-t2-busy2.json", "revisions-1d09d56-query-read-t1.json",
         "revisions-1d09d56-query-read-t2.json", "revisions-ccd5e39-query-node-t1.json",
         "revisions-ccd5e39-query-node-t2.json", "paths-ccd5e39-query-t1.json", "paths-ccd5e39-query-t2.json",
         "paths-ccd5e39-query-t1-busy2.json", "paths-ccd5e39-query-t2-busy2.json",
         "bag-rows-effc622-t1.json", "bag-rows-effc622-t1-busy2.json", "bag-rows-effc622-t2.json",
         "bag-rows-effc622-t2-busy2.json", "bag-rows-effc622-t2-busy2-r2.json", "bag-rows-9a2b815-t2.json",
         "bag-rows-9a2b815-t2-busy2.json", "bag-rows-9a2b815-t2-busy2-r2.json", "revisions-9a2b815-bag-t1.json",
         "half-bag-rows-6e4c7be-t1.json", "half-bag-rows-6e4c7be-t1-busy2.json", "half-bag-rows-6e4c7be-t2.json",
         "half-bag-rows-6e4c7be-t2-busy2.json", "revisions-c1c562a-half-bag-t1.json",
         "revisions-c1c562a-half-bag-t2.json",
         "revisions-af911b4-half-tanh-t1.json", "revisions-af911b4-half-tanh-t2.json",
         "revisions-af911b4-half-tanh-t1-busy2.json", "revisions-af911b4-half-tanh-t2-busy2.json",
         "revisions-3c48ded-holder-t1.json", "revisions-3c48ded-holder-t2.json",
         "revisions-3c48ded-holder-t1-busy2.json", "revisions-3c48ded-holder-t2-busy2.json",
         "revisions-e97be22-compiled-t1.json", "revisions-e97be22-compiled-t2.json",
         "revisions-e97be22-compiled-t1-busy2.json", "revisions-e97be22-compiled-t2-busy2.json",
         "revisions-e97be22-sum-bag-t1.json", "revisions-e97be22-sum-bag-t2.json",
         "revisions-e97be22-sum-bag-t1-busy2.json", "revisions-e97be22-sum-bag-t2-busy2.json",
         "revisions-10f2156-mends-t1.json", "revisions-10f2156-mends-t2.json",
         "revisions-10f2156-mends-t1-busy2.json", "revisions-10f2156-mends-t2-busy2.json",
         "revisions-e8b2e98-inline-t1.json", "revisions-e8b2e98-inline-t2.json",
         "revisions-e8b2e98-inline-t1-busy2.json", "revisions-e8b2e98-inline-t2-busy2.json",
         "revisions-58e7a07-training-t1.json", "revisions-58e7a07-training-t2.json",
         "revisions-58e7a07-training-t1-busy2.json", "revisions-58e7a07-training-t2-busy2.json",
         "revisions-c6d3925-holders32-t1.json", "revisions-c6d3925-holders32-t2.json",
         "revisions-c6d3925-holders32-t1-busy2.json", "revisions-c6d3925-holders32-t2-busy2.json",
         "tried-loop-mean-rows-07ec403-t2.json", "tried-loop-mean-rows-07ec403-t2-busy2.json",
         "tried-loop-max-rows-07ec403-t2.json", "tried-loop-max-rows-07ec403-t2-busy2.json",
         "tried-loop-spread-rows-07ec403-t2.json", "tried-loop-spread-rows-07ec403-t2-busy2.json",
         "revisions-07ec403-tried-threads-t2.json", "revisions-07ec403-tried-threads-t2-busy2.json",
         "revisions-2f51b10-fused-t1.json", "revisions-2f51b10-fused-t2.json", "revisions-2f51b10-fused-t1-busy2.json",
         "revisions-2f51b10-fused-t2-busy2.json", "revisions-5498a7b-mends-t1.json", "revisions-5498a7b-mends-t2.json",
         "revisions-5498a7b-mends-t1-busy2.json", "revisions-5498a7b-mends-t2-busy2.json",
         "tried-query-rows-efe6b52-t2.json", "tried-query-rows-efe6b52-t2-busy2.json",
         "revisions-efe6b52-query-mapped-t2.json", "revisions-efe6b52-query-mapped-t2-busy2.json",
         "paths-20a31c2-t1.json", "paths-20a31c2-t2.json", "paths-20a31c2-t1-busy2.json", "paths-20a31c2-t2-busy2.json",
         "paths-20a31c2-t2-r2.json", "paths-20a31c2-t2-busy2-r2.json", "paths-67a30bb-extremes-t1.json",
         "paths-67a30bb-extremes-t2.json", "paths-67a30bb-extremes-t1-busy2.json", "paths-67a30bb-extremes-t2-busy2.json",
         "paths-0838b42-rest-t1.json", "paths-0838b42-rest-t2.json", "paths-0838b42-rest-t1-busy2.json",
         "paths-0838b42-rest-t2-busy2.json",
         "max-rows-67a30bb-t1.json", "max-rows-67a30bb-t1-busy2.json", "max-rows-67a30bb-t2.json",
         "max-rows-67a30bb-t2-busy2.json",
         "blocks-b18e274-t1.json", "blocks-b18e274-t1-busy2.json", "blocks-b18e274-t2.json", "blocks-b18e274-t2-busy2.json",
         "blocks-4dade0b-half-t2.json", "blocks-4dade0b-half-t2-busy2.json", "blocks-4dade0b-half-t2-busy2-r2.json",
         "blocks-8872d80-zen4-half-t2.json", "blocks-8872d80-zen4-half-t2-busy2.json",
         "blocks-8872d80-zen4-half-t2-busy2-r2.json",
         "paths-071d2c2-t2.json", "paths-071d2c2-t2-busy2.json", "paths-d0f20ee-half-t1.json",
         "paths-d0f20ee-half-t2.json", "paths-d0f20ee-half-t1-busy2.json", "paths-d0f20ee-half-t2-busy2.json",
         "revisions-339f8cf-dense-t1.json", "revisions-f59a729-scores-t1.json", "revisions-f59a729-scores-t2.json",
         "revisions-f59a729-scores-t1-busy2.json", "revisions-f59a729-scores-t2-busy2.json",
         "paths-c543733-scores-t1.json", "paths-c543733-scores-t2.json", "paths-c543733-scores-t1-busy2.json",
         "paths-c543733-scores-t2-busy2.json", "paths-cdc68df-zen4-t1.json", "paths-cdc68df-zen4-t2.json",
         "paths-cdc68df-zen4-t1-busy2.json", "paths-cdc68df-zen4-t2-busy2.json", "revisions-01cff15-hooks-t1.json",
         "revisions-01cff15-hooks-t2.json"]
#: The suite's runs at torch's default thread count and beside busy processes (issue 29, item 5), in the page's
#: order. Each gives only its provenance and target rows (``NAME run``, ``NAME targets``, ``NAME targets 2-5``):
#: its whole tables stay in the file.
CONDITIONS = ["suite-fb1b624-t2.json", "suite-fb1b624-t1-busy2.json", "suite-fb1b624-t2-busy2.json"]
CONDITION_BLOCKS = (" run", " targets", " targets 2-5")
#: Cells further than this from 1.00x are listed under each table.
THRESHOLD = 0.05

#: What each result kind's ratio means: (above 1, below 1).
MEANING = {"revisions": ("faster now", "slower now"),
           "paths": ("the plain forms are slower (the fast forms help)", "the plain forms are faster")}


def config_label(row: dict) -> str:
    return f"T{row['T']} D{row['D']} {row['dtype']} {row['mode']}"


def agreeing(row: dict, name: str) -> str:
    """How many repeats fall on the same side of 1 as the median: '6/7'."""
    ratios, median = row["per_repeat"][name], row["speedup"][name]
    return f"{sum((r > 1) == (median > 1) for r in ratios)}/{len(ratios)}"


def tree(result: dict) -> str:
    """What code was timed: the exported revision, or the working tree at a commit with its uncommitted paths."""
    if result.get("new"):
        return f"new side: `{result['new']}` ({result['new_commit'][:7]}), exported from git like the old one"
    dirty = result.get("uncommitted")
    return f"working tree at {result['commit'][:7]}" + (f" (+ uncommitted: {', '.join(dirty)})" if dirty else "")


#: Row sweeps whose file name starts with this timed a rule that was reverted: they record its picks, so their checks
#: go to a ``rule: tried ...`` block of their own, apart from the sweeps of the rule the code runs.
TRIED = "tried-"
#: The perf_row_slices sweeps by kind: (the reduction's flag, what the figure is).
ROW_SWEEPS = {
    "max_rows": ("", "the masked max's `index_reduce` form / its row-slices form, > 1 is the row slices faster"),
    "sum_rows": (" --reduction sum", "the half-precision sum's float32 copy and product / its row-slices form, > 1 "
                                     "is the row slices faster"),
    "bag_rows": (" --reduction bag", "the float32 mean's batched product / the sum by one embedding bag over the real "
                                     "tokens divided by the counts (the row slices in the tables), > 1 is the bag "
                                     "faster"),
    "half_bag_rows": (" --reduction half_bag", "the half-precision sum's float32 sum rounded to x's dtype / the sum "
                                               "by one embedding bag in x's dtype (the row slices in the tables), > 1 "
                                               "is the bag faster"),
    "query_rows": (" --reduction query", "latent / adapool's half-precision read of x from a float32 copy of x / a "
                                         "block of rows at a time, > 1 is the blocks faster"),
    "query_train_rows": (" --reduction query_train", "latent / adapool's half-precision read of x and its gradients "
                                                     "from a float32 copy of x / a block of rows at a time, > 1 is the "
                                                     "blocks faster"),
    **{f"loop_{name}_rows": (f" --reduction loop_{name}", f"the compiled {what} on one core / over blocks of rows on "
                                                          "torch's threads (the row slices in the tables), > 1 is the "
                                                          "threads faster")
       for name, what in (("mean", "mean's loop"), ("max", "max's loop with its holders"),
                          ("spread", "spread (a mean's bf16 gradient)"))},
}


def provenance(result: dict, path: Path) -> str:
    settings, machine = result["settings"], result["machine"]
    load = machine.get("load_average")
    if result["kind"] == "revisions":
        what = (f"`benchmarks/perf_revisions.py --against {result['against']}` ({result['against_commit'][:7]}): "
                "old time / new time, > 1 is faster now")
    elif result["kind"] == "paths":
        what = ("`benchmarks/perf_paths.py`: the working tree's plain forms (`fast.disabled()`) / its fast forms, "
                "> 1 is the fast forms faster")
    elif result["kind"] == "blocks":
        what = ("`benchmarks/perf_blocks.py`: the plain form / the fast form at each block size, > 1 is the fast form "
                "faster; `*` the size the code picks at this thread count")
    elif result["kind"] in ROW_SWEEPS:
        flag, figure = ROW_SWEEPS[result["kind"]]
        what = (f"`benchmarks/perf_row_slices.py{flag}`: {figure}; rows of real lengths drawn from [T/2, T]")
    elif result["kind"] == "where":
        what = ("`benchmarks/perf_where.py`: the pooler's time, the floor's and the pooling's alone (no contract) timed "
                "side by side, the pooling's operators profiled; shares of the pooler's forward time")
    else:
        what = "`benchmarks/perf_tokens.py`: pooler time / floor time, < 1 is faster than the floor"
    return (f"{what}. {tree(result)}; {result['date'][:10]}, {machine['cpu']}, {machine['cores']} cores, "
            f"torch {result['torch']}, {settings['threads']} torch thread(s)"
            + (f" beside {settings['background']} busy process(es) (`--background`)" if settings.get("background")
               else "")
            + (f", B = {settings['batch']}" if "batch" in settings else "")
            + f", {settings['repeats']} interleaved repeats per cell"
            + (f", load average {load[0]:.1f} at the start" if load else "")
            + f". Data: `{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`.")


def changes(result: dict, threshold: float) -> list[str]:
    """One line per pooler with a cell (as rendered, two decimals) above 1 + threshold or below 1 - threshold."""
    up_word, down_word = MEANING[result["kind"]]
    lines = []
    for name in result["settings"]["poolers"]:
        up, down = [], []
        for row in result["rows"]:
            value = round(row["speedup"][name], 2)  # the figure as the table shows it
            cell = f"{config_label(row)} {value:.2f}x ({agreeing(row, name)})"
            if value > 1 + threshold:
                up.append(cell)
            elif value < 1 - threshold:
                down.append(cell)
        parts = ([f"{up_word}: " + ", ".join(up)] if up else []) + ([f"{down_word}: " + ", ".join(down)] if down else [])
        if parts:
            lines.append(f"* `{name}`: " + "; ".join(parts))
    return lines


def render(path: Path, threshold: float = THRESHOLD) -> str:
    result = read_json(path)
    rows, names = result["rows"], result["settings"]["poolers"]
    headers = ["pooler"] + [config_label(r) for r in rows]
    body = [[name] + [f"{r['speedup'][name]:.2f}x" for r in rows] for name in names]
    out = [provenance(result, path), "", table(headers, body, padded=True), "",
           f"Cells more than {threshold:.0%} from 1.00x (median; in brackets, repeats on the same side of 1):", ""]
    out += changes(result, threshold) or ["* none"]
    if all("max_abs_diff" in r for r in rows):
        largest, row, name = max(((r["max_abs_diff"][n], r, n) for r in rows for n in names), key=lambda c: c[0])
        sides = "old and new" if result["kind"] == "revisions" else "plain and fast forms"
        out += ["", f"Largest output difference between the {sides}, over every cell: {largest:.2g} "
                    f"(`{name}`, {config_label(row)}; outputs of the same weights on the same inputs)."]
    return "\n".join(out)


def group_name(result: dict) -> str:
    """The marker name of the runs-agree block of a comparison: 'agreement: revisions 55de4ff' (the earlier
    revision) / 'agreement: paths 20a31c2' (the tree whose two forms were timed)."""
    kind = result["kind"]
    return f"agreement: {kind} " + (result["against_commit"] if kind == "revisions" else result["commit"])[:7]


def agreement(paths: list[Path], threshold: float) -> str:
    """Cells beyond ``threshold`` (as rendered) in the same direction in every run of one comparison (for each
    pooler, every run that timed it)."""
    results = [read_json(path) for path in paths]
    up_word, down_word = MEANING[results[0]["kind"]]
    lines = []
    for name in dict.fromkeys(n for res in results for n in res["settings"]["poolers"]):
        timed = [res for res in results if name in res["settings"]["poolers"]]
        up, down = [], []
        for row in timed[0]["rows"]:
            label = config_label(row)
            values = [round(next(r for r in res["rows"] if config_label(r) == label)["speedup"][name], 2)
                      for res in timed]
            cell = f"{label} " + " / ".join(f"{v:.2f}x" for v in values)
            if all(v > 1 + threshold for v in values):
                up.append(cell)
            elif all(v < 1 - threshold for v in values):
                down.append(cell)
        parts = ([f"{up_word}: " + ", ".join(up)] if up else []) + ([f"{down_word}: " + ", ".join(down)] if down else [])
        if parts:
            lines.append(f"* `{name}`: " + "; ".join(parts))
    files = ", ".join(f"`{path.name}` ({res['settings']['repeats']} repeats)" for path, res in zip(paths, results))
    return "\n".join([f"Cells more than {threshold:.0%} from 1.00x in the same direction in every run ({files}; "
                      "for each pooler, the runs that timed it; medians in that order):", "", *(lines or ["* none"])])


def newest_runs(paths: list[Path]) -> dict[str, list[tuple[Path, dict]]]:
    """Each pooler's runs of the plain-vs-fast comparison, at each thread count on the newest tree that timed it there
    (by run date; a tree is its commit and its uncommitted paths): the runs that say what its forms cost now."""
    runs = [(path, read_json(path)) for path in paths]
    runs = [(path, data) for path, data in runs if data.get("kind") == "paths"]

    def tree_of(data: dict) -> tuple:
        return data["commit"], tuple(data.get("uncommitted") or ())

    out = {}
    for name in dict.fromkeys(n for _, data in runs for n in data["settings"]["poolers"]):
        timed = [(path, data) for path, data in runs if name in data["settings"]["poolers"]]
        for threads in dict.fromkeys(data["settings"]["threads"] for _, data in timed):
            at = [(path, data) for path, data in timed if data["settings"]["threads"] == threads]
            newest = tree_of(max(at, key=lambda run: datetime.fromisoformat(run[1]["date"]))[1])
            out.setdefault(name, []).extend(run for run in at if tree_of(run[1]) == newest)
    return out


def plain_faster_in_every_run(paths: list[Path], threshold: float = THRESHOLD) -> dict[int, list[str]]:
    """Per torch thread count: the cells ('max T512 D768 bf16 fwd') whose plain form is faster by more than
    ``threshold`` (as rendered) in every one of the pooler's newest runs at that thread count (:func:`newest_runs`),
    quiet and beside busy processes alike. The code's rule (``fast.active``: the fast forms on every eager-CPU call,
    whatever the thread count) holds at the counts measured only while this is empty; a cell here would need the
    plain form kept at that thread count."""
    out = {}
    for name, runs in newest_runs(paths).items():
        for threads in sorted({data["settings"]["threads"] for _, data in runs}):
            at = [data for _, data in runs if data["settings"]["threads"] == threads]
            cells = out.setdefault(threads, [])
            for row in at[0]["rows"]:
                label = config_label(row)
                values = [round(next(r for r in data["rows"] if config_label(r) == label)["speedup"][name], 2)
                          for data in at]
                if all(v < 1 - threshold for v in values):
                    cells.append(f"`{name}` {label} " + " / ".join(f"{v:.2f}x" for v in values))
    return out


def rule_block(paths: list[Path], threshold: float = THRESHOLD) -> str:
    """Which form runs where, read off the committed plain-vs-fast runs: per thread count, the runs each pooler's
    verdict rests on and the cells where the plain form is faster in every one of them."""
    runs, faster = newest_runs(paths), plain_faster_in_every_run(paths, threshold)
    lines = []
    for threads in sorted(faster):
        sources = {}
        for name, timed in runs.items():
            at = [path.name for path, data in timed if data["settings"]["threads"] == threads]
            if at:
                sources.setdefault(tuple(at), []).append(f"`{name}`")
        basis = "; ".join(f"{', '.join(names)}: {', '.join(f'`{n}`' for n in files)}"
                          for files, names in sources.items())
        verdict = ("no cell has the plain forms faster in every run, so the fast forms run in every cell"
                   if not faster[threads] else "the plain forms faster in every run: " + ", ".join(faster[threads]))
        lines.append(f"* {threads} torch thread(s): {verdict} (runs: {basis})")
    return "\n".join([f"Cells more than {threshold:.0%} below 1.00x in every run of a pooler's newest timed tree at "
                      "one thread count:", "", *lines])


def floors_of(data: dict) -> dict | None:
    """The token-floor result in a file: ``perf_tokens.py --json``'s own, or the tokens suite of run_all's."""
    if data.get("kind") == "bench":
        return data["suites"].get("tokens")
    return data if data.get("kind") == "floors" else None


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def threads_used(data: dict) -> str:
    """The torch threads of a run_all run: '1 torch thread(s)', or "torch's default, 2 torch threads" for
    ``--threads 0``, the count as the run's device line gives it (run_all reads it before any suite sets one)."""
    threads = data["options"]["threads"]
    if threads:
        return f"{threads} torch thread(s)"
    default = re.search(r"(\d+) torch threads", data["device"]).group(1)
    return f"torch's default, {default} torch threads"


def suites_run(data: dict, path: Path) -> str:
    """The provenance of a run_all run: the tree, machine, threads, background load, repeats and each suite's load."""
    machine, suites, options = data["machine"], data["suites"], data["options"]
    background = options.get("background", 0)
    repeats = ", ".join(f"{name} {suite['repeats']}" for name, suite in suites.items() if "repeats" in suite)
    loads = ", ".join(f"{name} {suite['load_average']['start'][0]:.1f} -> {suite['load_average']['end'][0]:.1f}"
                      for name, suite in suites.items())
    return (f"`benchmarks/run_all.py --only {options['only']} --threads {options['threads']}"
            + (f" --background {background}" if background else "") + "`: "
            f"{tree(data)}; {data['date'][:10]}, {machine['cpu']}, {machine['cores']} cores, torch {data['torch']}, "
            f"{threads_used(data)}" + (f" beside {background} busy process(es)" if background else "")
            + f"; interleaved repeats per cell: {repeats}" + (" (memory: one call per variant, each in a fresh "
                                                               "process)" if "memory" in suites else "")
            + f"; 1-minute load average at each suite's start -> end: {loads}. Data: "
            f"`{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}` (every repeat's ratio is kept in it).")


def snippets_block(suite: dict) -> str:
    rows = suite["rows"]
    weighted = [r for r in rows if r["comparison"].startswith("weighted_layer")]
    return "\n\n".join([perf_snippets.render(rows).lstrip("\n"), "Weighted layers + CLS per repeat: " + "; ".join(
        f"{r['mode']} " + ", ".join(f"{x:.1f}x" for x in r["per_repeat"]) for r in weighted)])


def suites_targets(suites: dict) -> str:
    """Targets rows 2-5: each stated target, the figures that judge it, met or missed."""
    judged = []

    def row(item: str, target: str, result: str, met: bool) -> None:
        judged.append([item, target, result, "met" if met else "**missed**"])

    if "snippets" in suites:
        rows = suites["snippets"]["rows"]
        low = min(rows, key=lambda r: r["speedup"] / r["target"])
        weighted = {r["mode"]: r for r in rows if r["comparison"].startswith("weighted_layer")}
        within = sum(r["speedup"] >= r["target"] for r in rows)
        row("2", "never slower than the snippets / ST `Pooling` (>= 1x); weighted layers + CLS >= 100x at "
                 "T = 256, forward",
            f"{within} of {len(rows)} comparisons at target; lowest against its target: {low['comparison']} "
            f"{low['mode']} {low['speedup']:.2f}x; weighted layers + CLS "
            + ", ".join(f"{m} {r['speedup']:.1f}x (per repeat {span(r['per_repeat'], unit='x')})"
                        for m, r in weighted.items()),
            within == len(rows))
    if "memory" in suites:
        cells = [r for r in suites["memory"]["rows"] if r["poolkit"]]
        over = [r for r in cells if r["share"] > perf_memory.TARGET]
        top = max(cells, key=lambda r: r["share"])
        stack = max((r for r in suites["memory"]["rows"] if r["variant"].startswith("snippet")),
                    key=lambda r: r["share"])
        row("3", f"layer pooling over 13 hidden states adds <= {perf_memory.TARGET:.0%} peak memory "
                 "(inference and training forward)",
            f"{len(cells) - len(over)} of {len(cells)} poolkit cells within; highest: {top['variant']} "
            f"({top['mode']}) {_pct(top['share'])}"
            + "".join(f"; over: {r['variant']} ({r['mode']}) {_pct(r['share'])}" for r in over if r is not top)
            + f"; the stacking snippets up to +{_pct(stack['share'])}", not over)
    modes = [suites[name] for name in ("model", "model_train") if name in suites]
    if modes:
        parts, met = [], True
        for result in modes:
            ranked = sorted(result["rows"], key=lambda r: -r["share"])
            met &= ranked[0]["share"] <= perf_model.TARGET
            parts.append(f"{result['mode']}: highest " + ", ".join(f"`{r['pooler']}` {100 * r['share']:.2f}%"
                                                                    for r in ranked[:3]))
        row("4", f"every token pooler <= {perf_model.TARGET:.0%} of a MiniLM forward "
                 f"({perf_model.BATCH} x {perf_model.LENGTH})", "; ".join(parts), met)
    if "embed" in suites:
        embed = suites["embed"]
        aim = "aim met" if embed["speedup"] >= perf_embed.AIM else "aim missed"
        row("5", f"embedding throughput >= {perf_embed.TARGET:g}x sentence-transformers `encode`, aim "
                 f"{perf_embed.AIM:g}x",
            f"{embed['speedup']:.2f}x (per repeat {span(embed['per_repeat'], unit='x')}), {embed['texts']} texts, "
            f"through `poolkit.TextEncoder`; {aim}", embed["speedup"] >= perf_embed.TARGET)
    return table(["#", "target", "result", ""], judged)


def padding_target(result: dict) -> str:
    """Target row 6 from ``dynamic_padding.json`` (its summaries, as docs/benchmarks-compare.md reads them)."""
    sums = {d["name"]: d["summary"] for d in result["datasets"]}
    target = next(iter(sums.values()))["target"]
    figures = "; ".join(f"{name}: {s['cpu_speedup']:.2f}x per CPU s ({s['speedup']:.2f}x wall), fixed padding pads "
                        f"{s['tokens']:.1f}x more tokens" for name, s in sums.items())
    met = all(s["target_met"] for s in sums.values())
    return "\n".join([table(["#", "target", "result", ""],
                                     [["6", f"training throughput, dynamic vs fixed max-length padding >= {target}x",
                                       figures, "met" if met else "**missed**"]]), "",
                      result_provenance(result, "benchmarks/results/dynamic_padding.json")])


def file_blocks(path: Path, data: dict) -> dict[str, str]:
    """The blocks a result file gives (none for another renderer's file)."""
    floors, blocks = floors_of(data), {}
    if floors is not None:
        blocks[path.name] = provenance(floors, path.resolve()) + "\n" + perf_tokens.render(floors)
        blocks[f"{path.name} targets"] = perf_tokens.targets(floors)
    suites = {k: v for k, v in data.get("suites", {}).items() if k in SUITE_BLOCKS or k == "model_train"}
    if suites:
        blocks[f"{path.name} run"] = suites_run(data, path.resolve())
        blocks[f"{path.name} targets 2-5"] = suites_targets(suites)
        for name, block in SUITE_BLOCKS.items():
            if name in suites or name == "model" and "model_train" in suites:
                blocks[f"{path.name} {name}"] = block(suites)
    if data.get("kind") == "wait_policy":
        blocks[path.name] = perf_wait_policy.render(data)
    if data.get("benchmark") == "dynamic_padding":
        blocks[f"{path.name} targets"] = padding_target(data)
    spatial = data.get("suites", {}).get("spatial") or (data if data.get("kind") == "spatial" else None)
    if spatial is not None:
        blocks[f"{path.name} spatial"] = "\n".join([spatial_provenance(spatial, path.resolve()),
                                                    perf_spatial.render(spatial)])
    return blocks


def spatial_provenance(result: dict, path: Path) -> str:
    """What ``perf_spatial`` measured where: the tree, machine, threads, repeats, load and the result file."""
    machine, settings = result["machine"], result["settings"]
    load = machine.get("load_average")
    return (f"`benchmarks/perf_spatial.py`: pooler time / floor time (or / timm's time), < 1 is faster. "
            f"{tree(result)}; "
            f"{result['date'][:10]}, {machine['cpu']}, {machine['cores']} cores, torch {result['torch']}, "
            f"{settings['threads']} torch thread(s), {settings['repeats']} interleaved repeats per cell"
            + (f", load average {load[0]:.1f} at the start" if load else "")
            + f". Data: `{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}`.")


#: Sections 2-5's tables, each from run_all's suites (section 4: forward and, when run, forward + backward).
SUITE_BLOCKS = {"snippets": lambda suites: snippets_block(suites["snippets"]),
                "memory": lambda suites: perf_memory.render(suites["memory"]).lstrip("\n"),
                "model": lambda suites: perf_model.render(*(suites[n] for n in ("model", "model_train")
                                                            if n in suites)).lstrip("\n"),
                "embed": lambda suites: perf_embed.render(suites["embed"]).lstrip("\n")}


def blocks(paths: list[Path], threshold: float = THRESHOLD, conditions: list[Path] = ()) -> dict[str, str]:
    """Every block the result files at ``paths`` give, with an agreement block per comparison run more than once,
    and the provenance and target blocks (:data:`CONDITION_BLOCKS`) of the run_all runs at ``conditions``."""
    found, groups, sweeps, block_sweeps = {}, {}, {}, []
    for path in conditions:
        found.update({name: block for name, block in file_blocks(path, read_json(path)).items()
                      if name.endswith(CONDITION_BLOCKS)})
    for path in paths:
        data = read_json(path)
        if data.get("kind") in MEANING:
            found[path.name] = render(path, threshold)
            groups.setdefault(group_name(data), []).append(path)
        elif data.get("kind") in ROW_SWEEPS:
            found[path.name] = provenance(data, path.resolve()) + "\n\n" + perf_row_slices.render(data)
            sweeps.setdefault(("tried " if path.name.startswith(TRIED) else "") + data["kind"], []).append(data)
        elif data.get("kind") == "where":
            found[path.name] = provenance(data, path.resolve()) + "\n\n" + perf_where.render(data)
        elif data.get("kind") == "blocks":
            found[path.name] = provenance(data, path.resolve()) + "\n\n" + perf_blocks.render(data)
            block_sweeps.append(data)
        else:
            found.update(file_blocks(path, data))
    found.update({name: agreement(group, threshold) for name, group in groups.items() if len(group) > 1})
    if any(name.startswith("agreement: paths") for name in groups):
        found["rule: paths"] = rule_block(paths, threshold)
    found.update({f"rule: {kind.replace('_', ' ')}": perf_row_slices.render_rule(runs)
                  for kind, runs in sweeps.items()})
    if block_sweeps:
        found["rule: blocks"] = perf_blocks.render_rule(block_sweeps)
    return found


PAGE = Page("docs/performance.md", lambda: blocks([RESULTS / name for name in FILES],
                                                  conditions=[RESULTS / name for name in CONDITIONS]))
