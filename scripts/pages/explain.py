"""docs/explain.md's numbers, rendered from the committed result file docs/explain/results.json.

Source: ``results.json``, written by scripts/explain_wordnet.py (run by scripts/make_explain.sh).
"""

from __future__ import annotations

from rendering import ROOT, Page, made_at, read_json, table

FOLDER = ROOT / "docs" / "explain"
SHOWN_CLASSES = 8  # the most often predicted classes get a line of top words each


def render_setup(results: dict) -> str:
    s, model, prov = results["settings"], results["model"], results["provenance"]
    train = s["train"]
    return (f"Model: `poolkit train --data {s['data']} --pooler {model['pooler']['name']} --folds {train['folds']} "
            f"--epochs {train['epochs']} --encoder-lr {train['encoder_lr']:g}"
            f"{'' if train['max_length'] == 256 else ' --max-length ' + str(train['max_length'])} --seed {train['seed']}"
            f"{'' if train['train_only'] == 'all' else ' --train-only ' + train['train_only']}` on the packaged "
            f"all-MiniLM-L6-v2 ({s['rows']:,} WordNet glosses, 45 supersenses; checkpoint chosen on an inner split of "
            f"the training rows, best epoch {model['best_epoch']:g}; test accuracy {model['test_accuracy']:.3f} on its "
            f"held-out rows). Everything below is measured on "
            f"{'a random sample of ' if s.get('texts_sampled') else ''}{s['held_out_rows']:,} held-out rows, which no "
            f"training choice saw. Faithfulness: k = {', '.join(map(str, s['ks']))} words deleted, "
            f"{s['draws']} random draws per text and k, seed {s['seed']}. Took {results['seconds']['explain']:.0f} s to "
            f"explain and {results['seconds']['faithfulness']:.0f} s for the curve; commit "
            f"{made_at(prov)}.")


def render_curve(results: dict) -> str:
    curve = results["faithfulness"]
    rows = [[row["k"], row["texts"], f"{row['top_mean']:.3f} ± {row['top_sem']:.3f}",
             f"{row['random_mean']:.3f} ± {row['random_sem']:.3f}",
             f"{row['top_mean'] / row['random_mean']:.1f}x" if row["random_mean"] > 0 else "—",
             f"{100 * row['top_wins']:.0f}%"] for row in curve["rows"]]
    return "\n".join([f"Measure: {curve['measure']}, mean ± standard error over the texts with more than k words.", "",
                      table(["k", "texts", "top-k weighted words", "k random words", "ratio",
                             "texts where top-k moved it more"], rows, align="rrrrrr")])


def render_words(results: dict) -> str:
    counts = results["predicted_per_class"]
    shown = sorted((label for label in results["top_words"] if results["top_words"][label]),
                   key=lambda label: -counts[label])[:SHOWN_CLASSES]
    rows = [[label, counts[label], ", ".join(f"{w} ({lift:.1f}, {n})" for w, lift, n in results["top_words"][label])]
            for label in shown]
    return table(["predicted class", "held-out texts", "words with the highest lift (lift, occurrences)"], rows,
                 align="lrl")


def render_reading(results: dict) -> str:
    """The note: how far the top words beat random ones, and which classes lean on which words."""
    rows = results["faithfulness"]["rows"]
    first, last = rows[0], rows[-1]
    top = results["top_words"]
    counts = results["predicted_per_class"]
    shown = sorted((label for label in top if top[label]), key=lambda label: -counts[label])[:3]
    examples = "; ".join(f"{label}: {', '.join(w for w, _, _ in top[label][:3])}" for label in shown)
    lifts = [lift for label in shown for _, lift, _ in top[label][:3]]
    return (f"- Deleting the single most weighted word lowers the predicted class's probability by "
            f"{first['top_mean']:.3f} on average, against {first['random_mean']:.3f} for a random word; at k = "
            f"{last['k']} the drops are {last['top_mean']:.3f} and {last['random_mean']:.3f}. The top-k deletion moves "
            f"the prediction more than the random one for {100 * first['top_wins']:.0f}% of the texts at k = 1 and "
            f"{100 * last['top_wins']:.0f}% at k = {last['k']}.\n"
            f"- The words it leans on most, for the three most often predicted classes: {examples}; they get "
            f"{min(lifts):.1f} to {max(lifts):.1f} times a uniform share of the weight.")


def render() -> dict[str, str]:
    results = read_json(FOLDER / "results.json")
    return {"setup": render_setup(results), "curve": render_curve(results), "words": render_words(results),
            "reading": render_reading(results)}


PAGE = Page("docs/explain.md", render)
