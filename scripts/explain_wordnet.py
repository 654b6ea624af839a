"""docs/explain/'s result files: a `poolkit train` model on the embedded WordNet supersense subset, explained on its
held-out rows (the rows no training choice saw): the deletion faithfulness curve, the top words per class, an
explain report, and screenshots of it and of the compare report that scripts/make_explain.sh's compare run wrote
(RUN/compare; its leaderboard.json is copied to docs/explain/compare-leaderboard.json).

    scripts/make_explain.sh      # trains the model, then runs this script and renders docs/explain.md

    .venv/bin/python scripts/explain_wordnet.py --run runs/explain-wordnet     # this script alone

Writes docs/explain/results.json, faithfulness.png, explain-report.png, compare-report.png (the top of the compare
report) and compare-explained.png (its explained texts); the explain report itself goes to RUN/report-explain.html.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "docs" / "explain"
DATA = "builtin:embedded"
KS = (1, 2, 3, 4, 5)
DRAWS = 5
SHOWN_TEXTS = 200  # the explain report's texts (its screenshot shows the first page)


def faithfulness_figure(curve: dict, title: str):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.8))
    ax = fig.subplots()
    ks = [row["k"] for row in curve["rows"]]
    for kind, label, color in (("top", "top-k weighted words", "#d6301f"), ("random", "k random words", "#777777")):
        means = [row[f"{kind}_mean"] for row in curve["rows"]]
        errors = [row[f"{kind}_sem"] for row in curve["rows"]]
        ax.errorbar(ks, means, yerr=errors, marker="o", capsize=3, label=label, color=color)
    ax.set_xticks(ks)
    ax.set_xlabel("words deleted (k)")
    ax.set_ylabel("drop of the predicted class's probability")
    ax.set_title(title, fontsize=8, wrap=True)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def screenshot(html: Path, png: Path, height: int, heading: str | None = None) -> None:
    """The page as Chromium draws it (Debian chromium through Playwright; every request but the file refused),
    scrolled down to the ``heading`` (an h2's text) when given."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": height})
        own = html.resolve().as_uri()
        page.route("**/*", lambda route: route.continue_() if route.request.url == own else route.abort())
        page.goto(own)
        if heading:
            page.locator("h2", has_text=heading).evaluate("h => h.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(png))
        browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="the `poolkit train` folder (scripts/make_explain.sh's)")
    parser.add_argument("--folder", type=Path, default=FOLDER, help="where the result files go (default: docs/explain)")
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS), help="how many words to delete (default 1-5)")
    parser.add_argument("--draws", type=int, default=DRAWS, help="random deletions per text and k (default 5)")
    parser.add_argument("--texts", type=int, help="a random sample of this many held-out rows (default: all)")
    parser.add_argument("--pictures-only", action="store_true", help="only redraw faithfulness.png and the "
                        "screenshots from the result file and the reports in RUN (no model run)")
    args = parser.parse_args(argv)
    folder = args.folder
    sys.path.insert(0, str(ROOT / "src"))
    if args.pictures_only:
        draw_pictures(Path(args.run), folder)
        return 0
    from poolkit.data import load_data
    from poolkit.explain import Explainer, deletion_curve
    from poolkit.explain.report import Report
    from poolkit.io import atomic_write_json
    from poolkit.provenance import run_provenance
    from poolkit.training.finetune import META, TEST_OUTPUTS

    run = Path(args.run)
    fold = run / "fold_0"
    meta = json.loads((fold / META).read_text())
    held_out = np.load(fold / TEST_OUTPUTS)["test_rows"]
    table = load_data(DATA)
    if args.texts:
        held_out = np.sort(np.random.default_rng(1).choice(held_out, size=args.texts, replace=False))
    texts = [table.texts[i] for i in held_out]
    targets = [table.label_names[table.targets[i]] for i in held_out]
    start = time.perf_counter()
    explainer = Explainer(run)
    explanation = explainer.explain(texts, targets)
    explain_seconds = time.perf_counter() - start
    curve = deletion_curve(explainer, texts, ks=args.ks, draws=args.draws, seed=0, explanation=explanation)
    curve_seconds = time.perf_counter() - start - explain_seconds
    counts = {label: sum(item.prediction == label for item in explanation.items) for label in table.label_names}
    accuracy = float(np.mean([item.prediction == item.target for item in explanation.items]))
    folder.mkdir(parents=True, exist_ok=True)
    result = {
        "script": "scripts/make_explain.sh (poolkit train, then scripts/explain_wordnet.py)",
        "provenance": run_provenance(),
        "settings": {"data": DATA, "rows": len(table), "held_out_rows": len(texts), "train": meta["config"],
                     "ks": args.ks, "draws": args.draws, "seed": 0,
                     "texts_sampled": args.texts},
        "model": {"pooler": explanation.pooler, "test_accuracy": meta["metrics"]["accuracy"],
                  "held_out_accuracy_here": accuracy, "best_epoch": meta["best_epoch"]},
        "meaning": explanation.meaning, "merge": explanation.merge,
        "faithfulness": curve,
        "predicted_per_class": counts,
        "top_words": explanation.top_words(k=6, min_count=3),
        "seconds": {"explain": round(explain_seconds, 1), "faithfulness": round(curve_seconds, 1)},
    }
    atomic_write_json(folder / "results.json", result)
    picked = np.random.default_rng(0).permutation(len(texts))[:SHOWN_TEXTS]  # the held-out rows come class by class
    shown = explainer.explain([texts[i] for i in picked], [targets[i] for i in picked])
    Report(f"poolkit explain: {shown.pooler['name']} pooler, WordNet supersense glosses (held out)"
           ).explanations(shown).write(run / "report-explain.html")
    draw_pictures(run, folder)
    return 0


def draw_pictures(run: Path, folder: Path) -> None:
    """faithfulness.png from results.json, and the screenshots of the explain report (as the measuring step wrote it
    into ``run``) and of the compare report in ``run``/compare, whose leaderboard.json is copied beside them."""
    from poolkit.io import atomic_write

    result = json.loads((folder / "results.json").read_text())
    settings = result["settings"]
    figure = faithfulness_figure(result["faithfulness"], f"{result['model']['pooler']['name']} on WordNet supersenses, "
                                 f"{settings['held_out_rows']} held-out glosses, {settings['draws']} random draws each")
    atomic_write(folder / "faithfulness.png", lambda tmp: figure.savefig(tmp, dpi=120, format="png"))
    compare = run / "compare"
    atomic_write(folder / "compare-leaderboard.json",
                 lambda tmp: Path(tmp).write_bytes((compare / "leaderboard.json").read_bytes()))
    screenshot(run / "report-explain.html", folder / "explain-report.png", height=900)
    screenshot(compare / "report.html", folder / "compare-report.png", height=1000)
    screenshot(compare / "report.html", folder / "compare-explained.png", height=900,
               heading="Explained texts of the best learned pooler")
    print(f"wrote {folder}/results.json, faithfulness.png, explain-report.png, compare-report.png, "
          "compare-explained.png, compare-leaderboard.json")

if __name__ == "__main__":
    raise SystemExit(main())
