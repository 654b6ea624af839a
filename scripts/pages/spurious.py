"""docs/spurious.md's numbers, rendered from the committed runs in docs/spurious/ (``poolkit bench spurious --out
docs/spurious``, the stripe cue) and docs/spurious-colour/ (``--cue colour``), and the presets in
``poolkit_bench.spurious_config``; the comparisons of both cues are one Holm family."""

from __future__ import annotations

import pandas as pd
from rendering import ROOT, Page, changed_settings, load_and_machine, presets_table, run_files, table
from verdicts import Comparison, Verdicts, counted, last_epochs, paired

from poolkit_bench.spurious import METHODS, PAPER, SANITY_POINTS, summarize
from poolkit_bench.spurious_config import CUES, PRESETS
from poolkit_bench.spurious_data import LABEL_CLASSES, LABEL_NAMES

#: Each cue's committed run.
FOLDERS = {"stripes": ROOT / "docs" / "spurious", "colour": ROOT / "docs" / "spurious-colour"}
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
    return presets_table("poolkit_bench.spurious_config", PRESETS, column, names)


def cue_of(results: dict) -> str:
    """The cue a run used (runs made before the setting existed had stripes)."""
    return results["settings"].get("cue", "stripes")


def load_runs() -> tuple[dict[str, dict], pd.DataFrame]:
    """Each cue's results.json, and both results.csv in one frame with a ``cue`` column."""
    runs, frames = {}, []
    for cue, folder in FOLDERS.items():
        results, frame = run_files(folder)
        if cue_of(results) != cue:
            raise ValueError(f"{folder} holds a run of the {cue_of(results)} cue, not {cue}")
        runs[cue] = results
        frames.append(frame.assign(cue=cue))
    return runs, pd.concat(frames, ignore_index=True)


def summarize_cues(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`summarize` per cue, with a ``cue`` column."""
    return pd.concat([summarize(part).assign(cue=cue) for cue, part in frame.groupby("cue", sort=False)],
                     ignore_index=True)


def render_data(runs: dict[str, dict]) -> str:
    s = runs["stripes"]["settings"]
    cues = "; ".join(f"the {cue} cue: 0 = {CUES[cue][0]}, 1 = {CUES[cue][1]}" for cue in runs)
    lines = [f"Core label 0 = {LABEL_NAMES[0]} (Fashion-MNIST classes {', '.join(map(str, LABEL_CLASSES[0]))}), "
             f"1 = {LABEL_NAMES[1]} (classes {', '.join(map(str, LABEL_CLASSES[1]))}); {cues}; in a {s['patch']} px "
             f"patch; the 28 px garment and the patch at random, non-overlapping places on a {s['canvas']} px canvas. "
             "Group = 2 × label + cue (groups 1 and 2: the cue disagrees with the label). Exact rows per group "
             "0 / 1 / 2 / 3 in the committed runs:", ""]
    rows = [[cue, f"{float(agreement):g}", *(" / ".join(map(str, counts[split]))
                                            for split in ("train", "val", "reweight", "test"))]
            for cue, results in runs.items() for agreement, counts in results["group_counts"].items()]
    return "\n".join([*lines, table(["cue", "training agreement", "train", "validation", "reweighting", "test"], rows)])


def conditions(frame: pd.DataFrame) -> list[tuple[str, float]]:
    """The (cue, agreement) pairs of ``frame``, in its order."""
    return list(dict.fromkeys(zip(frame["cue"], frame["agreement"])))


def condition_rows(frame: pd.DataFrame, cue: str, agreement: float) -> pd.DataFrame:
    """The rows of ``frame`` at one cue and agreement."""
    return frame[(frame["cue"] == cue) & (frame["agreement"] == agreement)]


def page_verdicts(frame: pd.DataFrame) -> Verdicts:
    """The page's readings, tested together: per cue and agreement, every method's worst group against DFR's, and
    each attention pooler's against flex's (the static control), paired by seed."""
    comparisons = []
    for cue, agreement in conditions(frame):
        part = condition_rows(frame, cue, agreement)
        pairs = [(m, "dfr") for m in METHODS if m != "dfr"] + [(m, "flex") for m in ATTENTION]
        comparisons += [Comparison(key(cue, agreement, a, b), LABEL.get(a, a), LABEL.get(b, b),
                                   *paired(part, "seed", "method", "worst_group", a, b),
                                   f"worst-group acc., {cue}, agreement {agreement:g}") for a, b in pairs]
    return Verdicts(comparisons)


def key(cue: str, agreement: float, a: str, b: str) -> str:
    return f"{cue} {agreement:g} {a} vs {b}"


def render_results(summary: pd.DataFrame, verdicts: Verdicts) -> str:
    lines = []
    for cue, agreement in conditions(summary):
        part = condition_rows(summary, cue, agreement).set_index("method")
        seeds = int(part["seeds"].iloc[0])
        rows = []
        for method in METHODS:
            row = part.loc[method]
            vs = verdicts[key(cue, agreement, method, "dfr")] if method != "dfr" else None
            rows.append([DESCRIBE[method], pct(row["worst_group_mean"], row["worst_group_std"]),
                         pct(row["average_mean"], row["average_std"]), vs.difference("") + vs.mark if vs else "—",
                         f"{row['cue_mass_mean']:.3f}", f"{row['garment_mass_mean']:.3f}"])
        lines += [f"**{cue.capitalize()} cue, training agreement {agreement:g}** (test agreement 0.5; {seeds} seeds, "
                  "mean ± sample std; the difference to DFR paired by seed, *(noise)* from the page's tests below):", "",
                  table(["method", "worst-group acc. %", "average acc. %", "worst group vs DFR (points)",
                         "weight on cue", "weight on garment"], rows, align="lrrrrr"), ""]
    return "\n".join(lines)


def render_sanity(runs: dict[str, dict]) -> str:
    lines = []
    for cue, agreement, check in ((c, a, k) for c, results in runs.items() for a, k in results["sanity"].items()):
        gaps = ", ".join(f"{g:.1f}" for g in check["erm_gap_points"])
        verdict = ("met" if check["ok"] else "**NOT MET: ERM hardly learned the cue at this agreement, so its rows "
                   "say little about removing it**")
        lines.append(f"- {cue}, agreement {float(agreement):g}: ERM's average minus worst-group accuracy is "
                     f"{check['mean_gap_points']:.1f} points on average (per seed: {gaps}); required "
                     f">= {SANITY_POINTS:g}: {verdict}.")
    return "\n".join(lines)


def render_paper(summary: pd.DataFrame) -> str:
    published = PAPER["dfr_worst_group"]
    rows = [["Waterbirds", published["waterbirds"], "the paper's (Kirichenko et al. 2023)"],
            ["CelebA hair colour", published["celeba"], "the paper's (Kirichenko et al. 2023)"]]
    rows += [[f"this benchmark, {row.cue} cue, training agreement {row.agreement:g}",
              pct(row.worst_group_mean, row.worst_group_std), "ours"]
             for row in summary[summary["method"] == "dfr"].itertuples(index=False)]
    return table(["data set", "DFR worst-group acc. %", "source"], rows, align="lrl")


def render_findings(summary: pd.DataFrame, verdicts: Verdicts) -> str:
    """Per cue and agreement: DFR against ERM, each attention pooler against DFR and against flex (each from its
    test), and where each retrained pooler's weight goes relative to GAP's uniform weights; then what the tests say
    of the paper's claim and of the static control, over every cue and agreement."""
    lines = []
    found = conditions(summary)
    for cue, agreement in found:
        part = condition_rows(summary, cue, agreement).set_index("method")
        uniform_cue, uniform_garment = part.loc["erm", "cue_mass_mean"], part.loc["erm", "garment_mass_mean"]
        shifts = "; ".join(f"{m} {part.loc[m, 'cue_mass_mean'] / uniform_cue:.2f}x GAP's weight on the cue and "
                           f"{part.loc[m, 'garment_mass_mean'] / uniform_garment:.2f}x on the garment"
                           for m in METHODS[2:])
        tested = [verdicts[key(cue, agreement, "erm", "dfr")]]
        tested += [verdicts[key(cue, agreement, m, other)] for other in ("dfr", "flex") for m in ATTENTION]
        lines.append(f"- **{cue}, agreement {agreement:g}:** " + "; ".join(v.sentence() for v in tested)
                     + f". On minority test images: {shifts}.")
    lines += ["", claim_reading(verdicts, found, "dfr", "the paper's claim (attention reweighting beats DFR)"),
              claim_reading(verdicts, found, "flex", "input-dependent against static weights (the same recipe "
                            "with flex)")]
    return "\n".join(lines)


def claim_reading(verdicts: Verdicts, found: list[tuple[str, float]], other: str, what: str) -> str:
    """One line: over every (attention pooler, cue, agreement), where the pooler beats ``other``, where ``other``
    beats it, and how many are inside the noise."""
    tested = {(m, c, a): verdicts[key(c, a, m, other)] for c, a in found for m in ATTENTION}
    wins = [f"{m} on {c} at {a:g}" for (m, c, a), v in tested.items() if v.winner == LABEL.get(m, m)]
    losses = [f"{m} on {c} at {a:g}" for (m, c, a), v in tested.items()
              if v.detected and v.winner != LABEL.get(m, m)]
    noise = sum(not v.detected for v in tested.values())
    other = LABEL.get(other, other)
    return (f"- **{what}:** an attention pooler beats {other} in {len(wins)} of {len(tested)} (pooler, cue, "
            f"agreement) triples{' (' + ', '.join(wins) + ')' if wins else ''}; {other} beats it in {len(losses)}"
            f"{' (' + ', '.join(losses) + ')' if losses else ''}; inside the noise in {noise}.")


def render_choices(frame: pd.DataFrame, runs: dict[str, dict]) -> str:
    """How often a choice sat at the end of its range, over both cues' runs: ERM's best epoch the last one, DFR's C
    the grid's largest."""
    s = runs["stripes"]["settings"]
    if any({k: r["settings"][k] for k in ("epochs", "dfr_cs", "head_epochs")} !=
           {k: s[k] for k in ("epochs", "dfr_cs", "head_epochs")} for r in runs.values()):
        raise ValueError("the cues' runs differ in epochs, DFR's grid or head epochs: count their choices apart")
    erm = frame[frame["method"] == "erm"]["chosen"]
    dfr = frame[frame["method"] == "dfr"]["chosen"]
    last = last_epochs(choice == f"epoch {s['epochs']}" for choice in erm)
    edge = counted(choice == f"C {max(s['dfr_cs']):g}" for choice in dfr)
    return (f"ERM's validation-chosen epoch was the last of its {s['epochs']} in {last} runs; DFR's C was the "
            f"grid's largest ({max(s['dfr_cs']):g}) in {edge} runs. The retrained poolers train a fixed "
            f"{s['head_epochs']} epochs.")


def render_cost(runs: dict[str, dict]) -> str:
    return "\n\n".join(run_cost(results, FOLDERS[cue].name) for cue, results in runs.items())


def run_cost(results: dict, folder: str) -> str:
    s, prov = results["settings"], results["provenance"]
    changed = changed_settings(s, PRESETS["default"])
    runs = results["runs"]
    return (f"The committed run of the {cue_of(results)} cue (`docs/{folder}/results.json`; settings that differ "
            f"from the default preset: {changed}): {len(s['agreements'])} agreements × {s['seeds']} seeds. It took "
            f"{results['runtime_seconds'] / 60:.1f} minutes of wall time and {results['cpu_seconds'] / 60:.1f} "
            f"CPU-minutes with {s['threads']} torch threads on {prov['cores']} cores that other jobs shared (ERM "
            f"training {sum(r['erm_seconds'] for r in runs) / 60:.1f} min, everything fitted on the reweighting set "
            f"{sum(r['reweight_seconds'] for r in runs) / 60:.1f} min). " + load_and_machine(results))


def render() -> dict[str, str]:
    runs, frame = load_runs()
    summary = summarize_cues(frame)
    verdicts = page_verdicts(frame)
    return {"presets": render_presets(), "data": render_data(runs), "results": render_results(summary, verdicts),
            "sanity": render_sanity(runs), "paper": render_paper(summary),
            "findings": render_findings(summary, verdicts), "choices": render_choices(frame, runs),
            "verdicts": verdicts.block(), "cost": render_cost(runs)}


PAGE = Page("docs/spurious.md", render, readings=True)
