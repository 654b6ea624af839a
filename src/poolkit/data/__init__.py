"""Data layer: user tables, built-in datasets and length-grouped batching."""

from poolkit.data.batching import LengthGroupedBatchSampler, TextCollator, TextDataset, make_loader
from poolkit.data.builtin import DatasetInfo, list_datasets, load_builtin, load_data
from poolkit.data.tables import (TASKS, TableData, decode_labels, fold_splits, load_table, stratified_sample,
                                 train_val_split)

__all__ = [
    "TASKS",
    "DatasetInfo",
    "LengthGroupedBatchSampler",
    "TableData",
    "TextCollator",
    "TextDataset",
    "decode_labels",
    "fold_splits",
    "list_datasets",
    "load_builtin",
    "load_data",
    "load_table",
    "make_loader",
    "stratified_sample",
    "train_val_split",
]
