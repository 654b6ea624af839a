"""docs/spurious.md's numbers, rendered from the committed run in docs/spurious/ (``poolkit bench spurious --out
docs/spurious``) and the presets in ``poolkit_bench.spurious``."""

from __future__ import annotations

import pandas as pd
from rendering import ROOT, Page, changed_settings, load_and_machine, presets_table, run_files, table
from verdicts import Comparison, Verdicts, counted, last_epochs, paired

from poolkit_bench.spurious import METHODS, PAPER, PRESETS, SANITY_POINTS, summarize
from poolkit_bench.spurious_data import CUES, LABEL_CLASSES, LABEL_NAMES

FOLDER = ROOT / "docs" / "spurious"
ATTENTION = ("attention2d", "adapool2d")  # the input-dependent poolers the paper's claim is about
LABEL = {"erm": "ERM", "dfr": "DFR"}  # how a method is named in a reading
DESCRIBE = {"erm": "ERM (GAP + linear, as trained)", "dfr": "DFR (L1 logistic on standardised GAP features)",
            "attention2d": "attention2d + head, retrained", "adapool2d": "adapool2d + head, retrained",
            "flex": "flex + head, retrained (static control)"}


def pct(mean: float, std: float) -> str:
    return f"{100 * mean:.1f} ± {100 * std:.1f}"


def render_presets() -> str:
    """The three presets side by side."""
    def column(c) -> list[str]:
        return [", ".join(f"{a:g}" for a in c.agreements), f"{2 * c.train_per_label:,}", f"{2 * c.val_per_label:,}",
                f"{4 * c.reweight_per_group:,}", f"{4 * c.test_per_group:,}", "-".join(map(str, c.widths)),
                f"{c.epochs} (AdamW lr {c.lr:g}, wd {c.weight_decay:g}, batch {c.batch_size})",
                f"C in {{{', '.join(f'{x:g}' for x in c.dfr_cs)}}}, {c.dfr_retrains} retrains on {c.dfr_subsample:g} "
                "of each group",
                f"{c.head_epochs} epochs, lr in {{{', '.join(f'{x:g}' for x in c.head_lrs)}}}, wd in "
                f"{{{', '.join(f'{x:g}' for x in c.head_weight_decays)}}}", str(c.seeds)]
    names = ["training agreements", "training images", "validation images (training distribution)",
             "reweighting images (balanced)", "test images (balanced)", "CNN widths", "ERM epochs", "DFR",
             "retrained pooler + head", "seeds"]
    return presets_table("poolkit_bench.spurious", PRESETS, column, names)


def render_data(results: dict) -> str:
    s = results["settings"]
    names = CUES[s.get("cue", "stripes")]  # runs before the cue setting had stripes
    lines = [f"Core label 0 = {LABEL_NAMES[0]} (Fashion-MNIST classes {', '.join(map(str, LABEL_CLASSES[0]))}), "
             f"1 = {LABEL_NAMES[1]} (classes {', '.join(map(str, LABEL_CLASSES[1]))}); cue 0 = {names[0]}, "
             f"1 = {names[1]}, in a {s['patch']} px patch; the 28 px garment and the patch at random, "
             f"non-overlapping places on a {s['canvas']} px canvas. Group = 2 × label + cue (groups 1 and 2: the cue "
             "disagrees with the label). Exact rows per group 0 / 1 / 2 / 3 in the committed run:", ""]
    rows = [[f"{float(agreement):g}", *(" / ".join(map(str, counts[split]))
                                       for split in ("train", "val", "reweight", "test"))]
            for agreement, counts in results["group_counts"].items()]
    return "\n".join([*lines, table(["training agreement", "train", "validation", "reweighting", "test"], rows)])


def page_verdicts(frame: pd.DataFrame) -> Verdicts:
    """The page's readings, tested together: per agreement, every method's worst group against DFR's, and each
    attention pooler's against flex's (the static control), paired by seed."""
    comparisons = []
    for agreement in dict.fromkeys(frame["agreement"]):
        part = frame[frame["agreement"] == agreement]
        pairs = [(m, "dfr") for m in METHODS if m != "dfr"] + [(m, "flex") for m in ATTENTION]
        comparisons += [Comparison(key(agreement, a, b), LABEL.get(a, a), LABEL.get(b, b),
                                   *paired(part, "seed", "method", "worst_group", a, b),
                                   f"worst-group acc., agreement {agreement:g}") for a, b in pairs]
    return Verdicts(comparisons)


def key(agreement: float, a: str, b: str) -> str:
    return f"{agreement:g} {a} vs {b}"


def render_results(summary: pd.DataFrame, verdicts: Verdicts) -> str:
    lines = []
    for agreement in dict.fromkeys(summary["agreement"]):
        part = summary[summary["agreement"] == agreement].set_index("method")
        seeds = int(part["seeds"].iloc[0])
        rows = []
        for method in METHODS:
            row = part.loc[method]
            vs = verdicts[key(agreement, method, "dfr")] if method != "dfr" else None
            rows.append([DESCRIBE[method], pct(row["worst_group_mean"], row["worst_group_std"]),
                         pct(row["average_mean"], row["average_std"]), vs.difference("") + vs.mark if vs else "—",
                         f"{row['cue_mass_mean']:.3f}", f"{row['garment_mass_mean']:.3f}"])
        lines += [f"**Training agreement {agreement:g}** (test agreement 0.5; {seeds} seeds, mean ± sample std; "
                  "the difference to DFR paired by seed, *(noise)* from the page's tests below):", "",
                  table(["method", "worst-group acc. %", "average acc. %", "worst group vs DFR (points)",
                         "weight on cue", "weight on garment"], rows, align="lrrrrr"), ""]
    return "\n".join(lines)


def render_sanity(results: dict) -> str:
    lines = []
    for agreement, check in results["sanity"].items():
        gaps = ", ".join(f"{g:.1f}" for g in check["erm_gap_points"])
        verdict = ("met" if check["ok"] else "**NOT MET: ERM hardly learned the cue at this agreement, so its rows "
                   "say little about removing it**")
        lines.append(f"- agreement {float(agreement):g}: ERM's average minus worst-group accuracy is "
                     f"{check['mean_gap_points']:.1f} points on average (per seed: {gaps}); required "
                     f">= {SANITY_POINTS:g}: {verdict}.")
    return "\n".join(lines)


def render_paper(summary: pd.DataFrame) -> str:
    published = PAPER["dfr_worst_group"]
    rows = [["Waterbirds", published["waterbirds"], "the paper's (Kirichenko et al. 2023)"],
            ["CelebA hair colour", published["celeba"], "the paper's (Kirichenko et al. 2023)"]]
    rows += [[f"this benchmark, training agreement {row.agreement:g}", pct(row.worst_group_mean, row.worst_group_std),
              "ours"] for row in summary[summary["method"] == "dfr"].itertuples(index=False)]
    return table(["data set", "DFR worst-group acc. %", "source"], rows, align="lrl")


def render_findings(summary: pd.DataFrame, verdicts: Verdicts) -> str:
    """Per agreement: DFR against ERM, each attention pooler against DFR and against flex (each from its test),
    and where each retrained pooler's weight goes relative to GAP's uniform weights; then what the tests say of the
    paper's claim and of the static control."""
    lines = []
    agreements = list(dict.fromkeys(summary["agreement"]))
    for agreement in agreements:
        part = summary[summary["agreement"] == agreement].set_index("method")
        uniform_cue, uniform_garment = part.loc["erm", "cue_mass_mean"], part.loc["erm", "garment_mass_mean"]
        shifts = "; ".join(f"{m} {part.loc[m, 'cue_mass_mean'] / uniform_cue:.2f}x GAP's weight on the cue and "
                           f"{part.loc[m, 'garment_mass_mean'] / uniform_garment:.2f}x on the garment"
                           for m in METHODS[2:])
        tested = [verdicts[key(agreement, "erm", "dfr")]]
        tested += [verdicts[key(agreement, m, other)] for other in ("dfr", "flex") for m in ATTENTION]
        lines.append(f"- **agreement {agreement:g}:** " + "; ".join(v.sentence() for v in tested)
                     + f". On minority test images: {shifts}.")
    lines += ["", claim_reading(verdicts, agreements, "dfr", "the paper's claim (attention reweighting beats DFR)"),
              claim_reading(verdicts, agreements, "flex", "input-dependent against static weights (the same recipe "
                            "with flex)")]
    return "\n".join(lines)


def claim_reading(verdicts: Verdicts, agreements: list[float], other: str, what: str) -> str:
    """One line: over every (attention pooler, agreement), where the pooler beats ``other``, where ``other`` beats
    it, and how many are inside the noise."""
    tested = {(m, a): verdicts[key(a, m, other)] for a in agreements for m in ATTENTION}
    wins = [f"{m} at {a:g}" for (m, a), v in tested.items() if v.winner == LABEL.get(m, m)]
    losses = [f"{m} at {a:g}" for (m, a), v in tested.items() if v.detected and v.winner != LABEL.get(m, m)]
    noise = sum(not v.detected for v in tested.values())
    other = LABEL.get(other, other)
    return (f"- **{what}:** an attention pooler beats {other} in {len(wins)} of {len(tested)} (pooler, agreement) "
            f"pairs{' (' + ', '.join(wins) + ')' if wins else ''}; {other} beats it in {len(losses)}"
            f"{' (' + ', '.join(losses) + ')' if losses else ''}; inside the noise in {noise}.")


def render_choices(frame: pd.DataFrame, results: dict) -> str:
    """How often a choice sat at the end of its range: ERM's best epoch the last one, DFR's C the grid's largest."""
    s = results["settings"]
    erm = frame[frame["method"] == "erm"]["chosen"]
    dfr = frame[frame["method"] == "dfr"]["chosen"]
    last = last_epochs(choice == f"epoch {s['epochs']}" for choice in erm)
    edge = counted(choice == f"C {max(s['dfr_cs']):g}" for choice in dfr)
    return (f"ERM's validation-chosen epoch was the last of its {s['epochs']} in {last} runs; DFR's C was the "
            f"grid's largest ({max(s['dfr_cs']):g}) in {edge} runs. The retrained poolers train a fixed "
            f"{s['head_epochs']} epochs.")


def render_cost(results: dict) -> str:
    s, prov = results["settings"], results["provenance"]
    default = PRESETS["default"]
    changed = changed_settings(s, default)
    runs = results["runs"]
    return (f"The committed run (`docs/spurious/results.json`; settings that differ from the default preset: "
            f"{changed}): {len(s['agreements'])} agreements × {s['seeds']} seeds. It took "
            f"{results['runtime_seconds'] / 60:.1f} minutes of wall time and {results['cpu_seconds'] / 60:.1f} "
            f"CPU-minutes with {s['threads']} torch threads on {prov['cores']} cores that other jobs shared (ERM "
            f"training {sum(r['erm_seconds'] for r in runs) / 60:.1f} min, everything fitted on the reweighting set "
            f"{sum(r['reweight_seconds'] for r in runs) / 60:.1f} min). " + load_and_machine(results))


def render() -> dict[str, str]:
    results, frame = run_files(FOLDER)
    summary = summarize(frame)
    verdicts = page_verdicts(frame)
    return {"presets": render_presets(), "data": render_data(results), "results": render_results(summary, verdicts),
            "sanity": render_sanity(results), "paper": render_paper(summary),
            "findings": render_findings(summary, verdicts), "choices": render_choices(frame, results),
            "verdicts": verdicts.block(), "cost": render_cost(results)}


PAGE = Page("docs/spurious.md", render, readings=True)
