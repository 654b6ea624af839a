"""``poolkit bench spurious``: the generator's exact group counts and geometry, DFR's use of the reweighting rows only,
attention weights as distributions, a tiny run end to end, its repeatability and its CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from poolkit.bench.spurious_data import (CUE_NAMES, GARMENT, LABEL_CLASSES, assign_cues, make_spurious_data,
                                         planned_counts, texture)
from poolkit.bench.vision_data import Images
from poolkit.errors import PoolkitError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def fake_fashion(per_class: int = 40, test_per_class: int = 30) -> Images:
    """Fashion-MNIST's shape with random garments: class c's images hold the value (c + 1) / 20 in a blob."""
    gen = torch.Generator().manual_seed(0)

    def split(n):
        y = torch.arange(10).repeat_interleave(n)
        x = torch.zeros(len(y), 1, GARMENT, GARMENT)
        x[:, :, 4:24, 6:22] = ((y + 1) / 20)[:, None, None, None] * (0.5 + torch.rand(len(y), 1, 20, 16, generator=gen))
        return x.clamp(max=1.0), y

    (train_x, train_y), (test_x, test_y) = split(per_class), split(test_per_class)
    return Images("fashion-mnist", train_x, train_y, test_x, test_y, num_classes=10, flip=True)


SIZES = dict(train_per_label=60, val_per_label=20, reweight_per_group=8, test_per_group=10)


# -- generator ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("agreement", [0.95, 0.99, 0.5])
def test_group_counts_are_exact_and_agreement_is_per_label(agreement):
    # catches Bernoulli-drawn cues (counts off by noise), agreement pooled over both labels instead of per label,
    # minority groups swapped (cue = label for the minority), and reweight / test sets that are not balanced
    data = make_spurious_data(fake_fashion(), agreement=agreement, **SIZES, seed=3)
    for split, per_label, p in ((data.train, 60, agreement), (data.val, 20, agreement), (data.reweight, 16, 0.5),
                                (data.test, 20, 0.5)):
        assert split.counts() == planned_counts(per_label, p)
        for label in (0, 1):
            agree = int((split.cue[split.y == label] == label).sum())
            assert agree == round(p * per_label)
    assert planned_counts(2000, 0.95) == [1900, 100, 100, 1900] and planned_counts(2000, 0.99) == [1980, 20, 20, 1980]


def test_assign_cues_is_exact_for_odd_label_sizes():
    # catches a cue count rounded over all rows instead of per label
    labels = np.array([0] * 7 + [1] * 13)
    cues = assign_cues(labels, 0.8, np.random.default_rng(0))
    assert int((cues[:7] == 0).sum()) == round(0.8 * 7) and int((cues[7:] == 1).sum()) == round(0.8 * 13)


def test_garment_and_cue_never_overlap_and_each_holds_its_own_pixels():
    # catches overlapping boxes, a patch painted over by the garment (or the reverse), boxes that do not say where
    # the pixels are, cue textures swapped, and garments of the wrong label's classes
    images = fake_fashion()
    data = make_spurious_data(images, agreement=0.9, **SIZES, canvas=56, patch=14, seed=1)
    for split, pool in ((data.train, images.train_y), (data.test, images.test_y)):
        g, c = split.garment_box, split.cue_box
        apart = (c[:, 2] <= g[:, 0]) | (c[:, 0] >= g[:, 2]) | (c[:, 3] <= g[:, 1]) | (c[:, 1] >= g[:, 3])
        assert bool(apart.all())
        assert bool(((g[:, 2] - g[:, 0]) == GARMENT).all()) and bool(((c[:, 2] - c[:, 0]) == 14).all())
        for i in range(len(split.y)):
            canvas = split.x[i, 0]
            t, left, b, r = c[i].tolist()
            assert torch.equal(canvas[t:b, left:r], torch.from_numpy(texture(int(split.cue[i]), 14)))
            t, left, b, r = g[i].tolist()
            assert torch.equal(canvas[t:b, left:r], images.train_x[split.source[i], 0] if pool is images.train_y
                               else images.test_x[split.source[i], 0])
            outside = canvas.clone()
            outside[t:b, left:r] = 0
            outside[c[i, 0]:c[i, 2], c[i, 1]:c[i, 3]] = 0
            assert float(outside.abs().sum()) == 0.0  # nothing else on the canvas
        assert all(int(pool[s]) in LABEL_CLASSES[int(y)] for s, y in zip(split.source, split.y))
    assert len(CUE_NAMES) == 2 and not np.array_equal(texture(0, 8), texture(1, 8))


def test_splits_share_no_garment_and_the_positions_vary():
    # catches a reweighting set drawn from training images (DFR's held-out rows would leak) and a fixed position
    # (flex could then learn to drop the cue)
    data = make_spurious_data(fake_fashion(), agreement=0.95, **SIZES, seed=0)
    sources = [set(s.source.tolist()) for s in (data.train, data.val, data.reweight)]
    assert sum(map(len, sources)) == len(set().union(*sources)) == 120 + 40 + 32
    assert len({tuple(b) for b in data.train.cue_box[:, :2].tolist()}) > 30
    assert len({tuple(b) for b in data.train.garment_box[:, :2].tolist()}) > 30


def test_same_seed_same_data_and_another_seed_other_data():
    # catches unseeded draws (numpy's or torch's global generator)
    images = fake_fashion()
    a, b = (make_spurious_data(images, agreement=0.95, **SIZES, seed=4) for _ in range(2))
    c = make_spurious_data(images, agreement=0.95, **SIZES, seed=5)
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.cue, b.test.cue)
    assert not torch.equal(a.train.x, c.train.x)


@pytest.mark.parametrize("change, match", [
    (dict(agreement=1.2), "agreement"), (dict(canvas=50), "canvas of at least 56"),
    (dict(train_per_label=500), "too few"), (dict(test_per_group=0), "test_per_group"),
])
def test_bad_generator_settings_name_the_fix(change, match):
    options = dict(agreement=0.95, **SIZES) | change
    with pytest.raises(PoolkitError, match=match):
        make_spurious_data(fake_fashion(), **options)
