"""docs/explain.md's numbers, rendered from the committed result file docs/explain/results.json.

    .venv/bin/python scripts/render_explain.py --check        # exit 1 when the page differs from the file
    .venv/bin/python scripts/render_explain.py --write        # update the page's marked blocks

Source: ``results.json``, written by scripts/explain_wordnet.py (run by scripts/make_explain.sh).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import markers  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "explain.md"
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
            f"{(prov.get('commit') or 'unknown')[:10]}, torch {prov['torch']}, {prov['cpu']} ({prov['cores']} cores).")


def render_curve(results: dict) -> str:
    curve = results["faithfulness"]
    lines = [f"Measure: {curve['measure']}, mean ± standard error over the texts with more than k words.", "",
             "| k | texts | top-k weighted words | k random words | ratio | texts where top-k moved it more |",
             "|---:|---:|---:|---:|---:|---:|"]
    for row in curve["rows"]:
        ratio = f"{row['top_mean'] / row['random_mean']:.1f}x" if row["random_mean"] > 0 else "—"
        lines.append(f"| {row['k']} | {row['texts']} | {row['top_mean']:.3f} ± {row['top_sem']:.3f} | "
                     f"{row['random_mean']:.3f} ± {row['random_sem']:.3f} | {ratio} | {100 * row['top_wins']:.0f}% |")
    return "\n".join(lines)


def render_words(results: dict) -> str:
    counts = results["predicted_per_class"]
    shown = sorted((label for label in results["top_words"] if results["top_words"][label]),
                   key=lambda label: -counts[label])[:SHOWN_CLASSES]
    lines = ["| predicted class | held-out texts | words with the highest lift (lift, occurrences) |", "|---|---:|---|"]
    for label in shown:
        words = ", ".join(f"{w} ({lift:.1f}, {n})" for w, lift, n in results["top_words"][label])
        lines.append(f"| {label} | {counts[label]} | {words} |")
    return "\n".join(lines)


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


def render(folder: Path = FOLDER) -> dict[str, str]:
    results = json.loads((folder / "results.json").read_text())
    return {"setup": render_setup(results), "curve": render_curve(results), "words": render_words(results),
            "reading": render_reading(results)}


def main(argv: list[str] | None = None) -> int:
    return markers.main(DOC, lambda _: render(), __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
