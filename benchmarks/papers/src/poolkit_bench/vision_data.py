"""Images for ``poolkit bench vision``: Fashion-MNIST (Xiao et al. 2017, Debian ``dataset-fashion-mnist``, read from
its IDX files) and scikit-learn's bundled 8x8 digits (the tiny case), as float32 (N, 1, H, W) in [0, 1]."""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from poolkit.errors import PoolkitError

from .vision_config import DATASETS

#: Where Debian's ``dataset-fashion-mnist`` puts the four files.
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
#: IDX type codes (the byte after the two zero bytes of the magic number) -> big-endian numpy dtypes.
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
#: The digits' held-out test images, drawn once (seed 0) from the 1797.
DIGITS_TEST = 397


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """An IDX file (LeCun's MNIST format; gzip-compressed when it ends in .gz) as a numpy array of its shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] or data[1] or data[2] not in IDX_TYPES:
        raise PoolkitError(f"{path} is not an IDX file (its magic number is {data[:4].hex()!r}): give the "
                           f"MNIST-format file")
    ndim = data[3]
    dims = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    dtype = np.dtype(IDX_TYPES[data[2]])
    body = 4 + 4 * ndim
    if len(data) - body != int(np.prod(dims)) * dtype.itemsize:
        raise PoolkitError(f"{path}: the header says shape {dims} of {dtype.name} but {len(data) - body} bytes "
                           f"follow it: the file is truncated or not IDX; download it again")
    return np.frombuffer(data, dtype, offset=body).reshape(dims).astype(dtype.newbyteorder("="))


@dataclass(frozen=True)
class Images:
    """Training pool and test set: ``x`` float32 (N, 1, H, W) in [0, 1], ``y`` int64 (N,)."""

    name: str
    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    #: Horizontal flips keep the class (clothes yes, digits no).
    flip: bool


def load_images(name: str, root: str | os.PathLike | None = None) -> Images:
    """``fashion-mnist`` (60,000 / 10,000 images, 28x28, from ``root`` or :data:`FASHION_MNIST_DIR`) or
    ``digits`` (sklearn's 1797 8x8 images; a fixed 397 of them are the test set)."""
    if name == "fashion-mnist":
        return _fashion_mnist(Path(root) if root is not None else FASHION_MNIST_DIR)
    if name == "digits":
        return _digits()
    raise PoolkitError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")


def _fashion_mnist(root: Path) -> Images:
    files = {f"{split}_{kind}": root / f"{split}-{kind}-ubyte.gz"
             for split in ("train", "t10k") for kind in ("images-idx3", "labels-idx1")}
    missing = [p.name for p in files.values() if not p.exists()]
    if missing:
        raise PoolkitError(f"Fashion-MNIST not found in {root} (missing {', '.join(missing)}): run "
                           f"'sudo apt-get install dataset-fashion-mnist', or give the folder holding the IDX files")
    arrays = {key: read_idx(path) for key, path in files.items()}

    def images(a: np.ndarray) -> Tensor:  # torch's cast: the same floats, ~60x faster than numpy's astype here
        return torch.from_numpy(a).to(torch.float32).div_(255.0)[:, None]

    return Images("fashion-mnist", images(arrays["train_images-idx3"]),
                  torch.from_numpy(arrays["train_labels-idx1"].astype(np.int64)),
                  images(arrays["t10k_images-idx3"]), torch.from_numpy(arrays["t10k_labels-idx1"].astype(np.int64)),
                  num_classes=10, flip=True)


def _digits() -> Images:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.from_numpy(digits.images.astype(np.float32) / 16.0)[:, None]
    y = torch.from_numpy(digits.target.astype(np.int64))
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    test, train = order[:DIGITS_TEST], order[DIGITS_TEST:]
    return Images("digits", x[train], y[train], x[test], y[test], num_classes=10, flip=False)


def split_pool(count: int, size: int, val_size: int, data_seed: int, seed: int) -> tuple[Tensor, Tensor]:
    """Indices of the validation images (the first ``val_size`` of a ``data_seed`` permutation of the pool: the
    same for every run) and of ``size`` training images drawn by ``seed`` from the rest (paired across poolers)."""
    if val_size + size > count:
        raise PoolkitError(f"the training pool has {count} images: too few for a validation split of {val_size} "
                           f"and {size} training images; lower --sizes or --val-size")
    order = torch.randperm(count, generator=torch.Generator().manual_seed(data_seed))
    val, rest = order[:val_size], order[val_size:]
    picked = torch.randperm(len(rest), generator=torch.Generator().manual_seed(seed))[:size]
    return val, rest[picked]


def augment(x: Tensor, gen: torch.Generator, *, pad: int, flip: bool) -> Tensor:
    """A random crop of each image padded by ``pad`` zeros (a shift of up to ``pad`` pixels), and a horizontal
    flip of half of them when ``flip``: (B, 1, H, W) -> (B, 1, H, W)."""
    batch, _, height, width = x.shape
    if pad:
        padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
        dy = torch.randint(0, 2 * pad + 1, (batch, 1, 1), generator=gen).to(x.device)
        dx = torch.randint(0, 2 * pad + 1, (batch, 1, 1), generator=gen).to(x.device)
        rows = dy + torch.arange(height, device=x.device)[None, :, None]
        cols = dx + torch.arange(width, device=x.device)[None, None, :]
        x = padded[torch.arange(batch, device=x.device)[:, None, None], 0, rows, cols][:, None]
    if flip:
        flipped = (torch.rand(batch, generator=gen) < 0.5).to(x.device)
        x = torch.where(flipped[:, None, None, None], x.flip(-1), x)
    return x
