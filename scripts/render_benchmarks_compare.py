"""docs/benchmarks-compare.md's numbers, rendered from benchmarks/results/compare_cost.json and dynamic_padding.json
(written by ``benchmarks/compare_cost.py --json`` and ``benchmarks/dynamic_padding.py --json``).

    .venv/bin/python scripts/render_benchmarks_compare.py --check   # exit 1 when the page differs from the files
    .venv/bin/python scripts/render_benchmarks_compare.py --write   # update the page's marked blocks
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import markers  # noqa: E402
from markers import span  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks-compare.md"
RESULTS = ROOT / "benchmarks" / "results"
NAMES = {"longest": "dynamic (sorted + longest)", "max_length": "fixed (max_length)"}


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def provenance(result: dict, file: str) -> str:
    """Where and how a result file was measured, as one paragraph."""
    load = result["machine"]["load_average"]
    end = result["load_average_end"]
    dirty = result["uncommitted"]
    return (f"From `{file}`: measured {result['date']} at commit `{result['commit'][:10]}`"
            + (f" (with uncommitted changes to {', '.join(f'`{p}`' for p in dirty)})" if dirty else "")
            + f", on {result['machine']['cpu']} ({result['machine']['cores']} cores), torch {result['torch']}, "
            f"torch threads {result['options']['threads']}; 1-minute load average {load[0]:.1f} at the start and "
            f"{end[0]:.1f} at the end (other sessions shared the cores, so wall seconds are inflated and CPU seconds "
            "are the steadier figure).")


def render_compare(result: dict) -> dict[str, str]:
    s, summary, probe = result["settings"], result["summary"], result["settings"]["probe"]
    poolers = s["poolers"]
    setup = (f"Set-up (`settings` in the file): N = {s['texts']} embedded WordNet glosses, {len(poolers)} poolers "
             f"({', '.join(poolers)}), one holdout split ({s['fit_rows']} fit + {s['val_rows']} inner validation / "
             f"{s['test_rows']} test), epochs {probe['epochs']} with patience {probe['patience']} (every epoch runs), "
             f"batch {probe['batch_size']}, max_length {result['options']['max_length']}, {len(result['rounds'])} "
             f"interleaved rounds; (d) measured for {len(s['reencode_measured'])} of the {len(poolers)} poolers"
             + ("" if not summary["extrapolated"] else ", the others EXTRAPOLATED (their head time + the mean encoder "
                "overhead of the measured ones)") + ".")
    rows = ["| pooler | heads on cache (b), CPU s | re-encode (d), CPU s | (d) / (b) |", "|---|---:|---:|---:|"]
    for p, cell in summary["poolers"].items():
        star = "" if cell["measured"] else " (extrapolated)"
        rows.append(f"| {p} | {cell['heads']['cpu']:.2f} | {cell['reencode']['cpu']:.2f}{star} | "
                    f"{cell['reencode_over_heads']['cpu']:.1f}x |")
    cost = lambda key: f"{summary[key]['wall']:.1f} | {summary[key]['cpu']:.1f}"  # noqa: E731
    ratio = lambda key, d=1: f"{summary[key]['wall']:.{d}f}x | {summary[key]['cpu']:.{d}f}x"  # noqa: E731
    per_round = summary["cli_over_components_per_round"]
    table = ["| medians of the rounds | wall s | CPU s |", "|---|---:|---:|",
             f"| (a) T_encode (all layers, fresh cache) | {cost('encode')} |",
             f"| (b) T_heads (sum over poolers) | {cost('heads')} |", f"| (a) + (b) | {cost('components')} |",
             f"| (c) poolkit compare end to end | {cost('cli')} |",
             f"| (d) re-encode total, {len(poolers)} poolers | {cost('reencode')} |",
             f"| (c) / ((a) + (b)), target <= {summary['target_cli_over_components']}x | "
             f"{ratio('cli_over_components', 2)} |",
             f"| speed-up (d) / ((a) + (b)) | {ratio('reencode_over_components')} |",
             f"| speed-up (d) / (c) | {ratio('reencode_over_cli')} |",
             "", "(c) / ((a) + (b)) per round, CPU: " + ", ".join(f"{r['cpu']:.2f}x" for r in per_round) + "."]
    cells = summary["poolers"].values()
    reading = [
        f"* **End to end vs components: {summary['cli_over_components']['cpu']:.2f}x CPU "
        f"({summary['cli_over_components']['wall']:.2f}x wall), target <= {summary['target_cli_over_components']}x: "
        f"{verdict(summary['target_met'])}.** Per round, in CPU seconds: "
        f"{span([r['cpu'] for r in per_round], unit='x')}.",
        f"* **Speed-up over re-encoding: {summary['reencode_over_components']['cpu']:.1f}x in CPU seconds "
        f"({summary['reencode_over_components']['wall']:.1f}x wall) against (a)+(b), "
        f"{summary['reencode_over_cli']['cpu']:.1f}x ({summary['reencode_over_cli']['wall']:.1f}x wall) against the "
        f"CLI run.** Re-encoding costs {span([c['reencode']['cpu'] for c in cells], '{:.1f}')} CPU s per pooler "
        f"at this size, against {span([c['heads']['cpu'] for c in cells], '{:.2f}')} s for the pooler + head on "
        "the cache."]
    return {"compare-cost-run": provenance(result, "benchmarks/results/compare_cost.json"),
            "compare-cost-setup": setup, "compare-cost-poolers": "\n".join(rows),
            "compare-cost-summary": "\n".join(table), "compare-cost-reading": "\n".join(reading)}


def render_padding(result: dict) -> dict[str, str]:
    o, datasets = result["options"], result["datasets"]
    setup = (f"Settings (`options` in the file): batch {o['batch_size']}, max_length {o['max_length']}, a stratified "
             f"sample of {o['n']} rows per dataset ({', '.join(d['name'] + ': ' + str(d['rows']) for d in datasets)}), "
             f"untimed warm-up steps per variant {o['warmup']}, then interleaved repeats {o['repeats']} of "
             f"timed steps {o['steps']} per variant; the median repeat is reported."
             + (f" Skipped: {'; '.join(result['skipped'])}." if result["skipped"] else ""))
    rows = ["| dataset | variant | examples / wall s | examples / CPU s | padded tok / batch | real tok / batch | "
            "pad share |", "|---|---|---:|---:|---:|---:|---:|"]
    for d in datasets:
        for v, name in NAMES.items():
            r = d[v]
            rows.append(f"| {d['name']} | {name} | {r['median']:.1f} | {r['cpu_median']:.1f} | {r['padded']:.0f} | "
                        f"{r['real']:.0f} | {1 - r['real'] / r['padded']:.0%} |")
    rows.append("")
    for d in datasets:
        s = d["summary"]
        rows.append(f"- {d['name']}: dynamic / fixed throughput {s['speedup']:.2f}x wall, {s['cpu_speedup']:.2f}x "
                    f"per CPU s (target >= {s['target']}x: {verdict(s['target_met'])}); per repeat, wall "
                    f"{', '.join(f'{x:.2f}' for x in s['wall_per_repeat'])}, CPU "
                    f"{', '.join(f'{x:.2f}' for x in s['cpu_per_repeat'])}; fixed padding pads {s['tokens']:.1f}x "
                    "more tokens per batch.")
    sums = [d["summary"] for d in datasets]
    dyn = [d["longest"] for d in datasets]
    fix = [d["max_length"] for d in datasets]
    reading = [
        f"* **Dynamic padding: {span([s['cpu_speedup'] for s in sums], unit='x')} the fixed-padding throughput "
        "per CPU second "
        f"({span([s['speedup'] for s in sums], unit='x')} wall), target >= {sums[0]['target']}x: "
        f"{verdict(all(s['target_met'] for s in sums))}** (lowest ratio of a single repeat: "
        f"{min(min(s['wall_per_repeat']) for s in sums):.2f}x wall, {min(min(s['cpu_per_repeat']) for s in sums):.2f}x "
        "CPU).",
        f"* **Why:** the texts average {span([r['real'] / o['batch_size'] for r in dyn], '{:.0f}')} real tokens, "
        f"so padding every batch to {o['max_length']} makes {span([r['padded'] for r in fix], '{:.0f}')} tokens "
        f"per batch of which {span([r['real'] for r in fix], '{:.0f}')} are real "
        f"({span([100 * (1 - r['real'] / r['padded']) for r in fix], '{:.0f}', '%')} padding); length-grouped "
        f"batches padded to their longest text hold {span([r['padded'] for r in dyn], '{:.0f}')} tokens "
        f"({span([100 * (1 - r['real'] / r['padded']) for r in dyn], '{:.0f}', '%')} padding). Fixed padding "
        f"processes {span([s['tokens'] for s in sums], '{:.1f}', 'x')} more tokens."]
    return {"dynamic-padding-run": provenance(result, "benchmarks/results/dynamic_padding.json"),
            "dynamic-padding-setup": setup, "dynamic-padding-table": "\n".join(rows),
            "dynamic-padding-reading": "\n".join(reading)}


def render_targets(compare: dict, padding: dict) -> str:
    s = compare["summary"]
    rows = ["| benchmark | target | measured (CPU s / wall) | |", "|---|---|---|---|",
            f"| compare end to end vs (a) + (b) | <= {s['target_cli_over_components']}x | "
            f"{s['cli_over_components']['cpu']:.2f}x / {s['cli_over_components']['wall']:.2f}x | "
            f"{verdict(s['target_met'])} |",
            f"| compare vs re-encoding per pooler | (speed-up) | {s['reencode_over_components']['cpu']:.1f}x / "
            f"{s['reencode_over_components']['wall']:.1f}x vs (a)+(b); {s['reencode_over_cli']['cpu']:.1f}x / "
            f"{s['reencode_over_cli']['wall']:.1f}x vs the CLI run | |"]
    for d in padding["datasets"]:
        t = d["summary"]
        rows.append(f"| dynamic vs fixed padding, {d['name']} ({d['rows']} rows) | >= {t['target']}x | "
                    f"{t['cpu_speedup']:.2f}x / {t['speedup']:.2f}x | {verdict(t['target_met'])} |")
    missed = [r for r in rows[2:] if r.endswith("| MISSED |")]
    rows += ["", f"Targets missed: {len(missed)}. Each figure comes from one run of each script "
             "(the files above); repeated runs differ in the absolute seconds and, less, in the ratios."]
    return "\n".join(rows)


def render(_args=None) -> dict[str, str]:
    compare = json.loads((RESULTS / "compare_cost.json").read_text())
    padding = json.loads((RESULTS / "dynamic_padding.json").read_text())
    return {**render_compare(compare), **render_padding(padding), "targets": render_targets(compare, padding)}


def main(argv: list[str] | None = None) -> int:
    return markers.main(DOC, render, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
