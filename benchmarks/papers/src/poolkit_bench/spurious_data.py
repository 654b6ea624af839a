"""Images for ``poolkit bench spurious``: a Fashion-MNIST garment and a spurious texture patch, apart on one canvas.

An offline analogue of Waterbirds (Sagawa et al., ICLR 2020) for last-layer retraining (DFR, Kirichenko et al., ICLR
2023). The **core label** is the garment's group: 0 = upper-body garments (T-shirt/top, Pullover, Coat, Shirt), 1 =
footwear and bags (Sandal, Sneaker, Bag, Ankle boot); Trouser and Dress, neither, are left out. The split is the one
the issue proposes, it is balanced (four Fashion-MNIST classes a side, 24,000 training images each) and a CNN learns
it nearly perfectly without a cue, so a low worst-group accuracy can only come from the cue, not from a hard core
task. The **cue** fills a square patch, in one of two kinds (:data:`.spurious_config.CUES`): ``stripes``, a texture of
horizontal (cue 0) or vertical (cue 1) stripes on a grey canvas, or ``colour``, a solid red (cue 0) or green (cue 1)
patch on an RGB canvas whose garment is grey (equal channels), so that the two cues differ in hue only, not in
brightness or texture. Garment (28 x 28) and patch sit at random positions on a ``canvas`` x ``canvas`` black image,
their boxes never overlapping: a small CNN's last map resolves them apart, and no fixed-position weighting (flex) can
drop the cue.

Groups are (label, cue), ``group = 2 * label + cue``; the cue agrees with the label in groups 0 and 3. The
agreement is assigned, not drawn: of each label's n rows exactly ``round(agreement * n)`` get the agreeing cue
(which rows is a seeded shuffle), so the group counts are exactly what :func:`planned_counts` says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from poolkit.errors import PoolkitError

from .spurious_config import check_cue
from .vision_data import Images

#: Fashion-MNIST classes of each core label (0 T-shirt/top, 2 Pullover, 4 Coat, 6 Shirt | 5 Sandal, 7 Sneaker,
#: 8 Bag, 9 Ankle boot).
LABEL_CLASSES = ((0, 2, 4, 6), (5, 7, 8, 9))
LABEL_NAMES = ("upper-body garment", "footwear or bag")
GARMENT = 28
#: Stripe period in pixels (half on, half off).
STRIPE = 4


@dataclass(frozen=True)
class SpuriousSet:
    """One split: ``x`` float32 (N, C, S, S) in [0, 1] (C = :func:`channels` of the cue); ``y`` the core label and
    ``cue`` the cue, int64 (N,); boxes (N, 4) int64 as (top, left, bottom, right), bottom/right exclusive; ``source`` the Fashion-MNIST index."""

    x: Tensor
    y: Tensor
    cue: Tensor
    garment_box: Tensor
    cue_box: Tensor
    source: Tensor

    @property
    def group(self) -> Tensor:
        """2 * label + cue: groups 0 and 3 agree with the label, 1 and 2 are the minority when agreement > 0.5."""
        return 2 * self.y + self.cue

    def counts(self) -> list[int]:
        """Rows per group 0..3."""
        return torch.bincount(self.group, minlength=4).tolist()


@dataclass(frozen=True)
class SpuriousData:
    """train and val (epoch selection) at the training agreement; reweight (held out of training, group-balanced)
    and test at 0.5. train / val / reweight come from Fashion-MNIST's training images, disjointly; test from its
    test images."""

    train: SpuriousSet
    val: SpuriousSet
    reweight: SpuriousSet
    test: SpuriousSet
    agreement: float


def planned_counts(per_label: int, agreement: float) -> list[int]:
    """The group counts (0..3) of a split with ``per_label`` rows of each label at ``agreement``."""
    agree = round(agreement * per_label)
    return [agree, per_label - agree, per_label - agree, agree]


def assign_cues(labels: np.ndarray, agreement: float, rng: np.random.Generator) -> np.ndarray:
    """Each row's cue: of each label's n rows exactly round(agreement * n), a seeded choice, get the agreeing cue."""
    cues = 1 - labels
    for label in (0, 1):
        rows = np.flatnonzero(labels == label)
        agree = rng.permutation(rows)[:round(agreement * len(rows))]
        cues[agree] = label
    return cues


def place(count: int, canvas: int, patch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Top-left corners (count, 2) of a garment and a ``patch``-sized square, uniform over the placements whose boxes
    do not overlap: the garment uniformly, then the patch uniformly among the corners clear of it."""
    garment = rng.integers(0, canvas - GARMENT + 1, size=(count, 2))
    corners = np.stack(np.meshgrid(np.arange(canvas - patch + 1), np.arange(canvas - patch + 1), indexing="ij"), -1)
    corners = corners.reshape(-1, 2)
    patches = np.empty_like(garment)
    for i, (top, left) in enumerate(garment):
        # apart when the patch ends above / left of the garment, or starts below / right of it
        clear = ((corners[:, 0] + patch <= top) | (corners[:, 0] >= top + GARMENT)
                 | (corners[:, 1] + patch <= left) | (corners[:, 1] >= left + GARMENT))
        patches[i] = corners[rng.choice(np.flatnonzero(clear))]
    return garment, patches


def channels(kind: str) -> int:
    """Channels of a canvas with a ``kind`` cue: 1 (grey) for stripes, 3 (RGB) for colour."""
    return 3 if check_cue(kind) == "colour" else 1


def cue_patch(kind: str, cue: int, patch: int) -> np.ndarray:
    """The cue's pixels (C, patch, patch) float32. stripes: period :data:`STRIPE`, horizontal (cue 0) or vertical (1);
    colour: full red (cue 0) or full green (1), the other channels 0."""
    if channels(kind) == 3:
        pixels = np.zeros((3, patch, patch), np.float32)
        pixels[cue] = 1.0
        return pixels
    stripes = ((np.arange(patch) % STRIPE) < STRIPE // 2).astype(np.float32)
    rows = np.broadcast_to(stripes[:, None], (patch, patch))
    return np.ascontiguousarray(rows if cue == 0 else rows.T)[None]


def compose(garments: np.ndarray, labels: np.ndarray, cues: np.ndarray, source: np.ndarray, canvas: int, patch: int,
            rng: np.random.Generator, kind: str = "stripes") -> SpuriousSet:
    """Each garment (N, 28, 28) in [0, 1] (grey: the same in every channel) and its ``kind`` cue's patch on a black
    canvas, at :func:`place`'s positions."""
    count = len(labels)
    garment_at, patch_at = place(count, canvas, patch, rng)
    x = np.zeros((count, channels(kind), canvas, canvas), np.float32)
    patches = [cue_patch(kind, 0, patch), cue_patch(kind, 1, patch)]
    for i in range(count):
        (gy, gx), (py, px) = garment_at[i], patch_at[i]
        x[i, :, gy:gy + GARMENT, gx:gx + GARMENT] = garments[i]
        x[i, :, py:py + patch, px:px + patch] = patches[cues[i]]

    def boxes(corner: np.ndarray, size: int) -> Tensor:
        return torch.from_numpy(np.concatenate([corner, corner + size], axis=1).astype(np.int64))

    return SpuriousSet(torch.from_numpy(x), torch.from_numpy(labels.astype(np.int64)),
                       torch.from_numpy(cues.astype(np.int64)), boxes(garment_at, GARMENT), boxes(patch_at, patch),
                       torch.from_numpy(source.astype(np.int64)))


def make_split(pixels: Tensor, per_label: int, agreement: float, rows: list[np.ndarray], canvas: int,
               patch: int, rng: np.random.Generator, kind: str = "stripes") -> SpuriousSet:
    """``per_label`` garments of each label, taken from the front of ``rows[label]`` (a shuffled index list, consumed),
    at ``agreement``."""
    picked = []
    for label in (0, 1):
        if len(rows[label]) < per_label:
            raise PoolkitError(f"too few Fashion-MNIST images of label {label} ({LABEL_NAMES[label]}) left for a split "
                               f"of {per_label} per label: lower the split sizes")
        picked.append(rows[label][:per_label])
        rows[label] = rows[label][per_label:]
    source = np.concatenate(picked)
    labels = np.repeat([0, 1], per_label)
    cues = assign_cues(labels, agreement, rng)
    order = rng.permutation(len(source))  # labels interleaved, so that no slice of a split is one label
    garments = pixels[torch.from_numpy(source[order])].squeeze(1).numpy()
    return compose(garments, labels[order], cues[order], source[order], canvas, patch, rng, kind)


def label_rows(classes: Tensor, rng: np.random.Generator) -> list[np.ndarray]:
    """The indices of each core label's images, shuffled."""
    classes = classes.numpy()
    return [rng.permutation(np.flatnonzero(np.isin(classes, LABEL_CLASSES[label]))) for label in (0, 1)]


def make_spurious_data(images: Images, *, agreement: float, train_per_label: int, val_per_label: int,
                       reweight_per_group: int, test_per_group: int, canvas: int = 56, patch: int = 14,
                       cue: str = "stripes", seed: int = 0) -> SpuriousData:
    """The four splits from Fashion-MNIST ``images`` with a ``cue`` of :data:`.spurious_config.CUES`, all drawn from
    ``seed`` (the same garments, positions and cue assignments for either kind of cue). Group counts are exact:
    :func:`planned_counts` of each split's rows per label (reweight and test at agreement 0.5)."""
    if images.name != "fashion-mnist":
        raise PoolkitError(f"the spurious benchmark is built from Fashion-MNIST, got {images.name!r}")
    if not 0.5 <= agreement <= 1:
        raise PoolkitError(f"agreement is P(cue agrees with the label), in [0.5, 1]; got {agreement!r}")
    check_cue(cue)
    if patch < 1 or canvas < GARMENT + 2 * patch:  # a centred garment leaves (canvas - 28) / 2 px on each side
        raise PoolkitError(f"a canvas of {canvas} px leaves no room beside a centred 28 px garment for a {patch} px "
                           f"patch: use a canvas of at least {GARMENT + 2 * max(patch, 1)} px or a smaller patch")
    for name, value in (("train_per_label", train_per_label), ("val_per_label", val_per_label),
                        ("reweight_per_group", reweight_per_group), ("test_per_group", test_per_group)):
        if not isinstance(value, int) or value < 1:
            raise PoolkitError(f"{name} must be an int >= 1, got {value!r}")
    rng = np.random.default_rng(seed)
    pool = label_rows(images.train_y, rng)
    train, val, reweight = (make_split(images.train_x, n, p, pool, canvas, patch, rng, cue)
                            for n, p in ((train_per_label, agreement), (val_per_label, agreement),
                                         (2 * reweight_per_group, 0.5)))
    test = make_split(images.test_x, 2 * test_per_group, 0.5, label_rows(images.test_y, rng), canvas,
                      patch, rng, cue)
    return SpuriousData(train, val, reweight, test, agreement)
