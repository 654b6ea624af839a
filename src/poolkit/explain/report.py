"""Self-contained HTML reports: one file, CSS and JavaScript inline, pictures as ``data:`` URIs, and a content
security policy that forbids every network request. Shared by ``poolkit explain``, ``poolkit compare`` and the
benches: build a :class:`Report` from headings, tables, figures and settings (and at most one explanation
browser), then :meth:`Report.write` it atomically.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..io import atomic_write_content
from .explainer import Explanation

#: Nothing may be fetched: no scripts, styles, fonts or pictures from anywhere but the page itself.
CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
       "connect-src 'none'; form-action 'none'")
PAGE_SIZE = 50
ASSETS = Path(__file__).parent / "assets"


def embedded_json(data: Any) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element: ``<``, ``>`` and ``&`` written as ``\\u003c``,
    ``\\u003e``, ``\\u0026`` (the same string to JSON.parse), so that no text can end the element or open a comment
    (a text holding ``<!--<script>`` made the browser read the rest of the page as script data)."""
    return (json.dumps(data, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))


class Report:
    """A page built part by part: ``Report("title").heading(..).table(frame).figure(fig).write(path)``."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title = title
        self.parts = [f"<h1>{html.escape(title)}</h1>"]
        if subtitle:
            self.parts.append(f'<p class="subtitle">{html.escape(subtitle)}</p>')
        self.data: dict[str, Any] | None = None

    def heading(self, text: str) -> Report:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")
        return self

    def paragraph(self, text: str) -> Report:
        self.parts.append(f"<p>{html.escape(text)}</p>")
        return self

    def table(self, frame: pd.DataFrame, caption: str = "", float_format: str = "{:.4g}") -> Report:
        """A DataFrame as an HTML table (values escaped; floats to 4 significant digits)."""
        body = frame.to_html(index=False, escape=True, border=0, classes="data",
                             float_format=float_format.format, na_rep="")
        if caption:
            body = body.replace("<thead>", f"<caption>{html.escape(caption)}</caption><thead>", 1)
        self.parts.append(body)
        return self

    def figure(self, picture: Any, alt: str) -> Report:
        """A matplotlib Figure, PNG bytes or a PNG file, inlined as a data: URI."""
        if hasattr(picture, "savefig"):
            buffer = io.BytesIO()
            picture.savefig(buffer, format="png", dpi=110)
            picture = buffer.getvalue()
        elif isinstance(picture, (str, os.PathLike)):
            picture = Path(picture).read_bytes()
        encoded = base64.b64encode(picture).decode("ascii")
        self.parts.append(f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'
                          f"<figcaption>{html.escape(alt)}</figcaption></figure>")
        return self

    def settings(self, settings: dict[str, Any], summary: str = "settings") -> Report:
        text = json.dumps(settings, indent=1, default=str)
        self.parts.append(f'<details class="settings"><summary>{html.escape(summary)}</summary>'
                          f"<pre>{html.escape(text)}</pre></details>")
        return self

    def explanations(self, explanation: Explanation, page_size: int = PAGE_SIZE) -> Report:
        """The explanation browser: every text's words shaded by weight (weight on hover), its prediction, layer
        weights as bars, per-head rows; sortable, filterable by class, paged (the page renders one page at a time,
        so 1,000 texts stay quick)."""
        if self.data is not None:
            raise ValueError("a report holds one explanation browser")
        self.data = {**explanation.to_dict(), "page_size": page_size}
        about = (f"Weights: {explanation.meaning}. {explanation.merge[0].upper()}{explanation.merge[1:]}. "
                 f"Model: {explanation.source}.")
        self.parts.append(f'<p class="about" id="about">{html.escape(about)}</p>'
                          + (ASSETS / "explain.html").read_text())
        top = explanation.top_words(k=6, min_count=2)
        if any(top.values()):
            rows = [{"predicted class": label,
                     "words (lift, occurrences)": ", ".join(f"{word} ({lift:.1f}, {n})" for word, lift, n in found)}
                    for label, found in top.items() if found]
            self.heading("Words with the highest lift per predicted class").paragraph(
                "lift: a word's weight times its text's number of words (1 = a uniform share), averaged over the "
                "texts it occurs in (at least twice)").table(pd.DataFrame(rows))
        return self

    def html(self) -> str:
        style = (ASSETS / "report.css").read_text()
        script = ""
        if self.data is not None:
            payload = embedded_json(self.data)
            script = (f'<script type="application/json" id="explain-data">{payload}</script>'
                      f"<script>{(ASSETS / 'explain.js').read_text()}</script>")
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
                f"<title>{html.escape(self.title)}</title><style>{style}</style></head>"
                f"<body><main>{''.join(self.parts)}</main>{script}</body></html>\n")

    def write(self, path: str | os.PathLike) -> Path:
        """The page to ``path``, atomically."""
        atomic_write_content(path, self.html())
        return Path(path)


def write_bench_report(path: str | os.PathLike, title: str, tables: dict[str, pd.DataFrame],
                       pictures: dict[str, Any], settings: dict[str, Any]) -> Path:
    """A bench's report.html: its tables ({caption: frame}), pictures ({caption: Figure / PNG path}), settings."""
    report = Report(title)
    for caption, picture in pictures.items():
        report.figure(picture, caption)
    for caption, frame in tables.items():
        report.heading(caption).table(frame)
    return report.settings(settings).write(path)


def write_compare_report(board: Any, path: str | os.PathLike, bars: Any = None) -> Path:
    """``poolkit compare``'s report.html: the leaderboard table, what its columns mean and which rows are tied with
    the best, its bars with ± std error bars (and the cost picture), every fold's
    metrics, the settings, and the best learned pooler's explained texts when ``board.explanation`` holds them
    (its fold-0 model on fold 0's held-out rows). ``bars``: the leaderboard's picture when already drawn (a PNG
    path), else it is drawn."""
    report = Report("poolkit compare", board.title)
    report.heading("Leaderboard").table(board.frame.drop(columns="config"))
    for note in board.notes():
        report.paragraph(note)
    if board.tested:
        report.paragraph("Tied with the best frozen row (the best first): " + ", ".join(board.tied("frozen")) + ".")
    caption = (f"{board.settings['metric']}: mean ± sample std over the folds' test rows"
               + ("; right: the metric against the inference cost, the Pareto front named" if board.costed else ""))
    report.figure(bars if bars is not None else board.plot(), caption)
    curve = getattr(board, "curve", None)
    if curve is not None:
        report.heading("Learning curve").paragraph(curve.reading())
        report.figure(curve.plot(), f"{curve.metric} against the training rows per fold, each fold's test rows kept")
        report.table(curve.frame, "mean ± sample std over the folds at each training size")
    report.heading("Per fold").table(board.folds)
    specs = pd.DataFrame({"pooler": [row["pooler"] for row in board.rows], "mode": [row["mode"] for row in board.rows],
                          "spec": [json.dumps(row["config"]) for row in board.rows]})
    report.heading("Pooler specs").table(specs)
    explanation = getattr(board, "explanation", None)
    report.heading("Explained texts of the best learned pooler")
    if explanation is None:
        report.paragraph("None here: no pooler of this leaderboard has learned weights, or the page was drawn from "
                         "a saved leaderboard, which keeps no model. To explain a pooler: poolkit train --pooler NAME "
                         "... --out RUN; poolkit explain --model RUN ... --out report.html.")
    else:
        report.paragraph("Each text's words shaded by the weight the pooler gives them (the weight on hover), with "
                         "the prediction and the true label; which model explains which rows is said below.")
        report.explanations(explanation)
    return report.settings(board.settings).write(path)
