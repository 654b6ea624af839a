"""What the tests of the README and of the docs pages it links share (tests/docs): a page's shell lines and Python
blocks, the parts of a line, how a line (or a launcher's) is run, and the small files the lines read."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL = re.compile(r"```bash\n(.*?)```", re.S)
PYTHON = re.compile(r"```python\n(.*?)```", re.S)
OPTIONAL = re.compile(r"\s\[([^\]]+)\]")
ELIDED = "..."


def linked_pages() -> list[Path]:
    """The docs pages the README links, whose quick starts a reader goes on to."""
    return sorted({ROOT / name for name in re.findall(r"docs/[a-z_-]+\.md", README.read_text())})


def shell_lines(page: Path = README) -> list[str]:
    """Every command line of ``page``'s bash blocks, continuations joined, comments dropped."""
    lines = []
    for block in SHELL.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            if shlex.split(line, comments=True):
                lines.append(" ".join(line.split("#", 1)[0].split()))
    return lines


def python_blocks(page: Path = README) -> list[str]:
    return PYTHON.findall(page.read_text())


def variants(line: str) -> list[str]:
    """The line without its ``[optional part]`` s, and with them."""
    return [OPTIONAL.sub("", line), OPTIONAL.sub(r" \1", line)] if OPTIONAL.search(line) else [line]


def poolkit_argv(line: str) -> list[str] | None:
    """The arguments poolkit's parser gets from ``line`` (``poolkit ...`` or a launcher's ``-m poolkit.cli ...``),
    else None."""
    words = shlex.split(line)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    if words[:1] == ["poolkit"]:
        return words[1:]
    if "poolkit.cli" in words and words[words.index("poolkit.cli") - 1] == "-m":
        return words[words.index("poolkit.cli") + 1:]
    return None


def decided(line: str, table: dict) -> str | None:
    """The longest first words of ``table`` that ``line`` starts with (spacing aside), else None."""
    squeezed = " ".join(line.split())
    return max((start for start in table if squeezed.startswith(" ".join(start.split()))), key=len, default=None)


def substituted(text: str, substitutions: list[tuple[str, str]], where: str) -> str:
    """``text`` with each (old, new) made once (an empty old appends new to a line); an old that is gone fails,
    naming ``where``."""
    for old, new in substitutions:
        assert old in text, f"the substituted text {old!r} is gone from {where}"
        text = text.replace(old, new, 1) if old else f"{text} {new}"
    return text


def run_line(line: str) -> int:
    """Run one command line in the current folder: a poolkit line through poolkit's own ``main``, a ``python
    SCRIPT ...`` line (a script of the repository) in a fresh interpreter; its exit code."""
    from poolkit.cli import main

    argv = poolkit_argv(line)
    if argv is not None:
        return main(argv)
    words = shlex.split(line)
    assert words[0] == "python", f"not a poolkit or python line: {line!r}"
    return subprocess.run([sys.executable, str(ROOT / words[1]), *words[2:]], capture_output=True,
                          text=True).returncode


def launched(line: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a launcher line (``torchrun ...``, ``accelerate launch ...``: its program from this environment's bin
    folder) in ``cwd``, one torch thread per process; its output captured."""
    words = shlex.split(line)
    words[0] = str(Path(sys.executable).parent / words[0])
    return subprocess.run(words, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})

def tables(folder: Path) -> None:
    """The files the lines read, small: a labelled table with two numeric targets (train.csv; test.csv and new.csv
    its first rows), pairs for retrieval (text or query, doc, neg; more documents in more.csv) and similarity
    (text or a, b, score), two tables for merge (a.csv, b.csv: text, label, y) and a corpus (corpus.parquet,
    corpus.csv)."""
    import pandas as pd

    from tiny_models import WORDS

    rows = range(80)
    texts = [" ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11)) for i in rows]
    labels = ["good" if i % 3 else "bad" for i in rows]
    train = pd.DataFrame({"text": texts, "label": labels, "y1": [i % 7 * 0.5 for i in rows],
                          "y2": [(i * 3) % 5 for i in rows]})
    train.to_csv(folder / "train.csv", index=False)
    train.head(20).to_csv(folder / "test.csv", index=False)
    train.head(20).to_csv(folder / "new.csv", index=False)
    pd.DataFrame({"text": texts[:40], "query": texts[:40], "doc": [f"{t} very good" for t in texts[:40]],
                  "neg": [f"{t} not bad" for t in texts[40:]]}).to_csv(folder / "pairs.csv", index=False)
    pd.DataFrame({"doc": [f"{t} or red" for t in texts[40:60]]}).to_csv(folder / "more.csv", index=False)
    pd.DataFrame({"text": texts[:40], "a": texts[:40], "b": texts[1:41],
                  "score": [i % 6 for i in range(40)]}).to_csv(folder / "sts.csv", index=False)
    train[["text", "label", "y1"]].rename(columns={"y1": "y"}).head(40).to_csv(folder / "a.csv", index=False)
    train[["text", "label", "y2"]].rename(columns={"y2": "y"}).tail(40).to_csv(folder / "b.csv", index=False)
    pd.DataFrame({"text": texts}).to_parquet(folder / "corpus.parquet")
    pd.DataFrame({"text": texts}).to_csv(folder / "corpus.csv", index=False)


def reader_folder(monkeypatch, tmp_path: Path) -> Path:
    """A folder of :func:`tables`, made the current one, with the default model replaced by a tiny random BERT (the
    packaged MiniLM would take minutes here), poolkit's cache inside ``tmp_path`` and the hub offline."""
    from poolkit.models import encoders
    from tiny_models import tiny_bert_dir

    tiny = tiny_bert_dir(tmp_path / "tiny-bert")
    work = tmp_path / "work"
    work.mkdir()
    tables(work)
    monkeypatch.setattr(encoders, "default_model_path", lambda: tiny)
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(work)
    return work
