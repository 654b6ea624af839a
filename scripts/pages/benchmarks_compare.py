"""docs/benchmarks-compare.md's numbers, rendered from benchmarks/results/compare_cost.json and dynamic_padding.json
(written by ``benchmarks/compare_cost.py --json`` and ``benchmarks/dynamic_padding.py --json``).
"""

from __future__ import annotations

from rendering import ROOT, Page, machine, read_json, span, table

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
            + f", on {machine(result['machine']['cpu'], result['machine']['cores'])}, torch {result['torch']}, "
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
    pooler_rows = [[p, f"{cell['heads']['cpu']:.2f}",
                    f"{cell['reencode']['cpu']:.2f}" + ("" if cell["measured"] else " (extrapolated)"),
                    f"{cell['reencode_over_heads']['cpu']:.1f}x"] for p, cell in summary["poolers"].items()]
    cost = lambda key: [f"{summary[key]['wall']:.1f}", f"{summary[key]['cpu']:.1f}"]  # noqa: E731
    ratio = lambda key, d=1: [f"{summary[key]['wall']:.{d}f}x", f"{summary[key]['cpu']:.{d}f}x"]  # noqa: E731
    per_round = summary["cli_over_components_per_round"]
    medians = table(["medians of the rounds", "wall s", "CPU s"], [
        ["(a) T_encode (all layers, fresh cache)", *cost("encode")], ["(b) T_heads (sum over poolers)", *cost("heads")],
        ["(a) + (b)", *cost("components")], ["(c) poolkit compare end to end", *cost("cli")],
        [f"(d) re-encode total, {len(poolers)} poolers", *cost("reencode")],
        [f"(c) / ((a) + (b)), target <= {summary['target_cli_over_components']}x", *ratio("cli_over_components", 2)],
        ["speed-up (d) / ((a) + (b))", *ratio("reencode_over_components")],
        ["speed-up (d) / (c)", *ratio("reencode_over_cli")]], align="lrr")
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
            "compare-cost-setup": setup,
            "compare-cost-poolers": table(["pooler", "heads on cache (b), CPU s", "re-encode (d), CPU s", "(d) / (b)"],
                                          pooler_rows, align="lrrr"),
            "compare-cost-summary": "\n".join([medians, "", "(c) / ((a) + (b)) per round, CPU: "
                                               + ", ".join(f"{r['cpu']:.2f}x" for r in per_round) + "."]),
            "compare-cost-reading": "\n".join(reading)}


def render_padding(result: dict) -> dict[str, str]:
    o, datasets = result["options"], result["datasets"]
    setup = (f"Settings (`options` in the file): batch {o['batch_size']}, max_length {o['max_length']}, a stratified "
             f"sample of {o['n']} rows per dataset ({', '.join(d['name'] + ': ' + str(d['rows']) for d in datasets)}), "
             f"untimed warm-up steps per variant {o['warmup']}, then interleaved repeats {o['repeats']} of "
             f"timed steps {o['steps']} per variant; the median repeat is reported."
             + (f" Skipped: {'; '.join(result['skipped'])}." if result["skipped"] else ""))
    cells = [[d["name"], name, f"{d[v]['median']:.1f}", f"{d[v]['cpu_median']:.1f}", f"{d[v]['padded']:.0f}",
              f"{d[v]['real']:.0f}", f"{1 - d[v]['real'] / d[v]['padded']:.0%}"]
             for d in datasets for v, name in NAMES.items()]
    rows = [table(["dataset", "variant", "examples / wall s", "examples / CPU s", "padded tok / batch",
                   "real tok / batch", "pad share"], cells, align="llrrrrr"), ""]
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
    rows = [["compare end to end vs (a) + (b)", f"<= {s['target_cli_over_components']}x",
             f"{s['cli_over_components']['cpu']:.2f}x / {s['cli_over_components']['wall']:.2f}x", s["target_met"]],
            ["compare vs re-encoding per pooler", "(speed-up)", f"{s['reencode_over_components']['cpu']:.1f}x / "
             f"{s['reencode_over_components']['wall']:.1f}x vs (a)+(b); {s['reencode_over_cli']['cpu']:.1f}x / "
             f"{s['reencode_over_cli']['wall']:.1f}x vs the CLI run", None]]
    rows += [[f"dynamic vs fixed padding, {d['name']} ({d['rows']} rows)", f">= {d['summary']['target']}x",
              f"{d['summary']['cpu_speedup']:.2f}x / {d['summary']['speedup']:.2f}x", d["summary"]["target_met"]]
             for d in padding["datasets"]]
    missed = sum(met is False for *_, met in rows)
    return "\n".join([table(["benchmark", "target", "measured (CPU s / wall)", ""],
                            [[*row, "" if met is None else verdict(met)] for *row, met in rows]), "",
                      f"Targets missed: {missed}. Each figure comes from one run of each script (the files above); "
                      "repeated runs differ in the absolute seconds and, less, in the ratios."])


def render() -> dict[str, str]:
    compare, padding = read_json(RESULTS / "compare_cost.json"), read_json(RESULTS / "dynamic_padding.json")
    return {**render_compare(compare), **render_padding(padding), "targets": render_targets(compare, padding)}


PAGE = Page("docs/benchmarks-compare.md", render)
