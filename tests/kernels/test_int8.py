"""int8 similarity products: the quantisation against its rounding bound, the onnxruntime product
against numpy's integer product."""

import numpy as np
import pytest

from chunktree.kernels import int8


def unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("d", [5, 384])
def test_quantised_rows_round_to_the_nearest_step_of_their_own_scale(d):
    x = unit(300, d, seed=d)
    x[7] *= 1e-3  # a short row keeps its own, finer, scale
    left, scale_l = int8.quantise_rows(x)
    right, scale_r = int8.quantise_columns(x)
    np.testing.assert_allclose(scale_l, np.abs(x).max(axis=1) / 127, rtol=1e-6)
    np.testing.assert_array_equal(scale_l, scale_r)
    assert left.dtype == np.uint8 and right.dtype == np.int8 and right.shape == (d, 300)
    for q in (left.astype(np.int64) - 128, right.T.astype(np.int64)):
        assert np.abs(q).max() == 127
        assert (np.abs(q * scale_l[:, None] - x) <= scale_l[:, None] / 2 * (1 + 1e-5)).all()


def test_a_zero_row_is_quantised_to_zeros():
    x = np.zeros((2, 4), np.float32)
    x[1, 2] = -0.5
    left, _ = int8.quantise_rows(x)
    right, _ = int8.quantise_columns(x)
    assert left[0].tolist() == [128] * 4 and right[:, 0].tolist() == [0] * 4
    assert left[1].tolist() == [128, 128, 1, 128] and right[:, 1].tolist() == [0, 0, -127, 0]


def test_product_equals_the_integer_product_and_approximates_the_similarities():
    a, b = unit(130, 384, seed=1), unit(257, 384, seed=2)
    left, scale_a = int8.quantise_rows(a)
    right, scale_b = int8.quantise_columns(b)
    y = int8.product(left, right)
    assert y.dtype == np.int32 and y.shape == (130, 257)
    np.testing.assert_array_equal(y, (left.astype(np.int64) - 128) @ right.astype(np.int64))
    approx = y * scale_a[:, None] * scale_b[None, :]
    exact = a @ b.T
    # |a.b - qa.qb| <= sum |a_j| |err_b_j| + |qb_j| |err_a_j| <= (s_b |a|_1 + s_a |qb|_1) / 2
    qb = right.T.astype(np.float64) * scale_b[:, None]
    bound = (scale_b[None, :] * np.abs(a).sum(1)[:, None] + scale_a[:, None] * np.abs(qb).sum(1)[None, :]) / 2
    assert (np.abs(approx - exact) <= bound + 1e-6).all()
    assert np.abs(approx - exact).max() < 5e-3  # the typical error is far inside the bound
