"""docs/gated-mlp.md's numbers, rendered from the committed result files in docs/gated-mlp/ (``poolkit bench
gated-mlp``), and its readings, each from a declared test (GLU against each other variant on test accuracy, paired
t over the seeds, Holm-adjusted over the page).
"""

from __future__ import annotations

from rendering import ROOT, Page, run_files, span, table
from verdicts import Comparison, Verdicts, grouped_readings, last_epochs, paired

FOLDER = ROOT / "docs" / "gated-mlp"
#: the variant with the non-linearity on one factor: the claim's candidate, compared with every other variant
ASYMMETRIC = "glu"
#: how each variant treats its two factors, in the page's words
FORMS = {"gelu_mlp": "gelu(W x): one factor, the transformer's own FFN",
         "glu": "gelu(G x) * (V x): GELU on one factor (GeGLU)",
         "bilinear": "(G x) * (V x): no non-linearity",
         "both": "gelu(G x) * gelu(V x): GELU on both factors",
         "bilinear_attention": "softmax over the units of (G x) * (V x): the rank-1 logits normalised"}


def load() -> tuple[dict, object]:
    """(results.json, results.csv as a DataFrame)."""
    return run_files(FOLDER)


def comparisons(results: dict, frame) -> list[Comparison]:
    """GLU against each other variant of the run on test accuracy (higher is better), paired by seed."""
    others = [ffn for ffn in results["settings"]["ffns"] if ffn != ASYMMETRIC]
    return [Comparison(f"{ASYMMETRIC} vs {ffn}", ASYMMETRIC, ffn,
                       *paired(frame, "seed", "ffn", "test_accuracy", ASYMMETRIC, ffn), "test accuracy")
            for ffn in others if ASYMMETRIC in results["settings"]["ffns"]]


def render_run(results: dict) -> str:
    s, p, split = results["settings"], results["provenance"], results["split_rows"]
    start = results["load_average_start_end"][0][0]
    return (f"The committed run (`docs/gated-mlp/results.json`): commit `{p['commit'][:7]}`, {p['cpu']} "
            f"({p['cores']} cores, load average {start:.1f} at the start), torch {p['torch']}, {s['workers']} "
            f"worker(s) of {s['threads']} torch thread(s) each; {len(results['runs'])} training runs took "
            f"{results['runtime_seconds'] / 60:.1f} minutes ({results['cpu_seconds']:,.0f} CPU-seconds). Data "
            f"`{s['data']}`, {s['rows']:,} rows drawn (stratified, data seed {s['data_seed']}) and split "
            f"{split['fit']:,} fit / {split['val']:,} validation / {split['test']:,} test, {results['classes']} "
            f"classes; {results['vocabulary']:,} token ids (the MiniLM WordPiece ids seen at least {s['min_count']} "
            f"times in the fit rows, padding and one unknown id), at most {s['max_length']} tokens. The model: "
            f"width {s['dim']}, {s['heads']} heads, {s['layers']} pre-LayerNorm "
            f"block{'' if s['layers'] == 1 else 's'}, mean pooling, a linear head, dropout {s['dropout']:g}; AdamW "
            f"lr {s['lr']:g}, weight decay {s['weight_decay']:g}, batch {s['batch_size']}, {s['epochs']} epochs, the "
            f"epoch with the lowest validation loss scored once on the test rows; seeds "
            f"{s['seed']}-{s['seed'] + s['seeds'] - 1}.")


def gap(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}" if value >= 1e-12 else "0"


def render_variants(results: dict, frame) -> str:
    """Per variant: its form, hidden width, parameters and the two symmetry gaps."""
    first = frame.groupby("ffn", sort=False).first()
    rows = []
    for ffn in results["settings"]["ffns"]:
        gaps = results["symmetries"][ffn]
        rows.append([f"`{ffn}`", FORMS[ffn], str(first.loc[ffn, "hidden"]), f"{first.loc[ffn, 'ffn_params']:,}",
                     f"{first.loc[ffn, 'params']:,}", gap(gaps["exchange"]), gap(gaps["scaling"])])
    return "\n".join([
        "Each variant is `out(hidden(x))`, `out` a linear map back to the width; the FFN parameters are those of "
        "all blocks (`results.csv`: `hidden`, `ffn_params`, `params`). The gaps are how far the layer's output moves, "
        "relative to its size, when its two factors are exchanged (G <-> V) and rescaled (2 G, V / 2), at random "
        "weights in float64 (`results.json`, `symmetries`): 0 where the symmetry holds, — for one factor.", "",
        table(["variant", "hidden units", "hidden width", "FFN parameters", "model parameters", "exchange gap",
               "scaling gap"], rows, align="llrrrrr")])


def render_table(results: dict, frame, verdicts: Verdicts) -> str:
    """Per variant: test accuracy and loss, mean ± sample std over seeds, and GLU's difference with its reading."""
    rows = []
    for ffn in results["settings"]["ffns"]:
        runs = frame[frame["ffn"] == ffn]
        key = f"{ASYMMETRIC} vs {ffn}"
        shown = verdicts[key].difference() + verdicts[key].mark if key in verdicts else "—"
        rows.append([f"`{ffn}`", f"{runs['test_accuracy'].mean():.4f} ± {runs['test_accuracy'].std():.4f}",
                     span(runs["test_accuracy"].tolist(), "{:.4f}"),
                     f"{runs['test_loss'].mean():.4f} ± {runs['test_loss'].std():.4f}", shown])
    return "\n".join([
        f"Test accuracy and loss, mean ± sample std over {results['settings']['seeds']} seeds, and the range over "
        f"the seeds (`docs/gated-mlp/results.csv`, one row per run); the last column is {ASYMMETRIC} minus the "
        "variant in accuracy points, with its adjusted interval, *(noise)* where the page's test keeps it inside "
        "the noise.", "",
        table(["variant", "test accuracy", "range", "test loss", f"{ASYMMETRIC} − variant"], rows,
              align="lrrrr")])


def claim_word(verdicts: Verdicts) -> str:
    """'reproduced' when GLU beats every other variant, 'partly reproduced' when it beats some and none beats it,
    'not reproduced' otherwise."""
    winners = [v.winner for v in verdicts]
    if winners and all(w == ASYMMETRIC for w in winners):
        return "reproduced"
    if ASYMMETRIC in winners and all(w in (ASYMMETRIC, None) for w in winners):
        return "partly reproduced"
    return "not reproduced"


def render_findings(results: dict, verdicts: Verdicts) -> str:
    return (f"- **The asymmetric (one-factor) activation gives the better transformer: {claim_word(verdicts)}.** "
            f"{ASYMMETRIC} against each other variant on test accuracy (paired t over the "
            f"{results['settings']['seeds']} seeds, Holm-adjusted over the page's {len(verdicts)} comparisons): "
            + grouped_readings(verdicts, ASYMMETRIC) + ".")


def render_budget(results: dict) -> str:
    """Per variant: runs whose best validation epoch was the last, and the best epochs' range (from 1)."""
    epochs = results["settings"]["epochs"]
    rows = []
    for ffn in results["settings"]["ffns"]:
        best = [r["best_epoch"] for r in results["runs"] if r["ffn"] == ffn]
        seconds = [r["seconds"] for r in results["runs"] if r["ffn"] == ffn]
        rows.append([f"`{ffn}`", last_epochs([b == epochs - 1 for b in best]), span([b + 1 for b in best], "{:d}"),
                     f"{sum(seconds) / len(seconds):.0f}"])
    last = sum(r["best_epoch"] == epochs - 1 for r in results["runs"])
    return "\n".join([
        f"Runs whose best validation epoch was the last of the {epochs} (`results.json`, `runs[].best_epoch`; "
        f"*under-trained* where most of a variant's runs are), {last} of the {len(results['runs'])} in all; the best "
        "epochs' range, counted from 1; the mean wall seconds of a run:", "",
        table(["variant", "best epoch last", "best epoch", "seconds per run"], rows, align="lrrr")])


def render() -> dict[str, str]:
    results, frame = load()
    verdicts = Verdicts(comparisons(results, frame))
    return {"run": render_run(results), "variants": render_variants(results, frame),
            "table": render_table(results, frame, verdicts), "findings": render_findings(results, verdicts),
            "verdicts": verdicts.block(), "budget": render_budget(results)}


PAGE = Page("docs/gated-mlp.md", render, readings=True)
