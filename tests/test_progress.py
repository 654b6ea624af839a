"""Progress for a terminal and for a log (poolkit.progress): lines without carriage returns when the output is a file
or a pipe."""

from __future__ import annotations

import io

import pandas as pd

from poolkit.cli import main
from poolkit.progress import STEPS, progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_one_line_per_tenth_and_a_last_line_and_no_carriage_return():
    """Catches a bar that writes a frame per update (or any carriage return) into a log, and a total never said."""
    stream = io.StringIO()
    with progress(total=1000, desc="encoding", unit="text", stream=stream) as bar:
        for _ in range(1000):
            bar.update(1)
    text = stream.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and len(lines) == STEPS
    assert lines[0].startswith("encoding: 100/1000 texts (10%)") and "ETA" in lines[0]
    assert lines[-1].startswith("encoding: 1000/1000 texts (100%), done in")


def test_an_inner_loop_is_quiet_in_a_log_and_a_terminal_gets_tqdm():
    stream = io.StringIO()
    assert list(progress(range(5), desc="batches", leave=False, stream=stream)) == [0, 1, 2, 3, 4]
    assert stream.getvalue() == ""
    bar = progress(total=3, stream=Terminal())
    from tqdm import tqdm

    assert isinstance(bar, tqdm)
    bar.close()
    unknown = io.StringIO()
    with progress(desc="embedding", unit="text", stream=unknown) as bar:
        bar.update(7)
    assert unknown.getvalue() == "embedding: 7 texts, done in 0.0 s\n"


def test_embed_into_a_log_writes_lines_not_frames(model_dir, tmp_path, capsys):
    """`poolkit embed ... 2> log`: the command's stderr holds plain progress lines and none of transformers' bars."""
    pd.DataFrame({"text": [f"text number {i}" for i in range(40)]}).to_csv(tmp_path / "t.csv", index=False)
    assert main(["embed", "--data", str(tmp_path / "t.csv"), "--model", model_dir, "--out",
                 str(tmp_path / "v.npy")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "embedding: 40 texts, done in" in err and "Loading weights" not in err
