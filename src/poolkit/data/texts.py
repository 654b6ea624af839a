"""The texts of any input poolkit reads for predict, embed and explain: a table file, ``builtin:NAME`` or a list."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from .builtin import load_builtin
from .tables import frame_texts, read_frame


def read_texts(data: str | Path | Sequence[str], text_col: str = "text") -> tuple[pd.DataFrame, list[str]]:
    """The input table and its texts (missing values as ""): a file with a ``text_col`` column, ``builtin:NAME``
    (its texts and targets) or a list of texts (a one-column table)."""
    if not isinstance(data, (str, Path)):
        texts = [str(t) for t in data]
        return pd.DataFrame({text_col: texts}), texts
    if str(data).startswith("builtin:"):
        table = load_builtin(str(data))
        frame = pd.DataFrame({table.text_col: table.texts})
        if table.task == "classification":
            frame[table.target_cols[0]] = [table.label_names[i] for i in table.targets]
        elif table.task == "regression":
            for j, col in enumerate(table.target_cols):
                frame[col] = table.targets[:, j]
        return frame, list(table.texts)
    frame = read_frame(Path(data))
    return frame, frame_texts(frame, text_col, data)
