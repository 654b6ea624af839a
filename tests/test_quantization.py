"""poolkit.quantize: the codes of sentence-transformers' quantize_embeddings, by hand and against it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import poolkit
from poolkit import PoolkitError
from poolkit.quantization import KINDS, quantization_ranges


def test_codes_by_hand():
    # catches steps of (high - low) / 256, rounding to nearest, a missing -128, and the bit order of the packing
    # ranges 0..255: steps of exactly 1 (float32 rounding of 1/255 would move codes at the ends)
    vectors = np.array([[0.0, 127.5, 255.0, 254.9], [255.0, 0.0, 51.2, 127.9]], dtype=np.float32)
    ranges = np.array([[0.0, 0.0, 0.0, 0.0], [255.0, 255.0, 255.0, 255.0]])
    assert poolkit.quantize(vectors, "uint8", ranges=ranges).tolist() == [[0, 127, 255, 254], [255, 0, 51, 127]]
    assert poolkit.quantize(vectors, "int8", ranges=ranges).tolist() == [[-128, -1, 127, 126], [127, -128, -77, -1]]
    signs = np.array([[1, -1, 1, 1, -1, -1, -1, 1, 1, -1]], dtype=np.float32)  # 10 dimensions -> 2 bytes
    assert poolkit.quantize(signs, "ubinary").tolist() == [[0b10110001, 0b10000000]]
    assert poolkit.quantize(signs, "binary").tolist() == [[0b10110001 - 128, 0b10000000 - 128]]
    assert poolkit.quantize(torch.from_numpy(vectors), "float32").dtype == np.float32  # tensors are taken too


@pytest.mark.parametrize("kind", KINDS)
def test_equal_to_sentence_transformers(kind):
    from sentence_transformers.util.quantization import quantize_embeddings

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((60, 37)).astype(np.float32)
    vectors[:, 5] = 0.25  # a dimension with no spread
    narrow = (rng.standard_normal((90, 37)) * 0.6).astype(np.float32)  # the vectors stray outside its ranges
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ours, theirs in [
            (poolkit.quantize(vectors, kind), quantize_embeddings(vectors, kind)),
            (poolkit.quantize(vectors, kind, calibration=narrow),
             quantize_embeddings(vectors, kind, calibration_embeddings=narrow)),
            (poolkit.quantize(vectors, kind, ranges=quantization_ranges(narrow)),
             quantize_embeddings(vectors, kind, ranges=quantization_ranges(narrow))),
        ]:
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
            np.testing.assert_array_equal(ours, theirs)


def test_bad_input_is_one_line():
    vectors = np.ones((2, 4), dtype=np.float32)
    for call, told in [(lambda: poolkit.quantize(vectors, "int4"), "`kind` must be one of float32, int8"),
                       (lambda: poolkit.quantize(vectors[0], "int8"), "`vectors` must be a matrix"),
                       (lambda: poolkit.quantize(vectors * np.nan, "binary"), "`vectors` holds NaN or inf"),
                       (lambda: poolkit.quantize(vectors, "int8", ranges=np.ones((2, 3))), "`ranges` must be (2, 4)"),
                       (lambda: poolkit.quantize(vectors, "int8", calibration=np.ones((5, 3))),
                        "`ranges` must be (2, 4)")]:
        with pytest.raises(PoolkitError) as refused:
            call()
        assert told in str(refused.value) and "\n" not in str(refused.value)
