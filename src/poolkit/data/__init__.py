"""Data layer: user tables, built-in datasets and length-grouped batching.

``batching`` needs only torch and numpy (TextEncoder uses it under the [hf] extra); ``tables`` and ``builtin``
need pandas (the [cli] extra). Each name imports its module when first used.
"""

import importlib

#: How batches are padded: to the batch's longest text (dynamic), or every batch to ``max_length``.
PADDINGS = ("longest", "max_length")

#: Each public name and the module it comes from.
_SOURCES = {
    **dict.fromkeys(["LengthGroupedBatchSampler", "TextCollator", "TextDataset", "make_loader"], "batching"),
    **dict.fromkeys(["DatasetInfo", "list_datasets", "load_builtin", "load_data"], "builtin"),
    **dict.fromkeys(["TASKS", "TableData", "decode_labels", "fold_splits", "load_table", "repeated_folds",
                     "stratified_sample", "train_val_split"], "tables"),
}


def __getattr__(name: str):
    """Import the module a public name comes from (tables / builtin say to install [cli] when pandas is missing)."""
    if name in _SOURCES:
        return getattr(importlib.import_module(f"{__name__}.{_SOURCES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_SOURCES)
