"""Products on the bf16 units: the rounding against an arithmetic reference, the products against
float64 products of the rounded rows, the margin against adversarial rows, and the search's lists
against those of float32 products."""

import numpy as np
import pytest

from chunktree.kernels import bf16
from chunktree.kernels.topk import probe_lists, topk_clustered

needs_units = pytest.mark.skipif(not bf16.available(), reason="this CPU has no bf16 units OpenVINO lists")


def unit(n, d, seed=0, topics=None):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    if topics:
        x = 0.8 * rng.standard_normal((topics, d))[rng.integers(0, topics, n)] + x / np.sqrt(d) * 2
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def rounded(a):
    """``a`` rounded to 8 significant bits, to nearest, ties to even, by arithmetic on float64."""
    mantissa, exponent = np.frexp(a.astype(np.float64))  # a = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    return np.ldexp(np.round(mantissa * 2**8) / 2**8, exponent)  # np.round: half to even


def values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def test_rounding_to_bf16_is_to_nearest_ties_to_even_with_rows_of_zeros_after():
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((70, 33)) * np.exp2(rng.integers(-20, 20, (70, 33)))).astype(np.float32)
    a[0, :4] = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 0.0]  # ties: to the even neighbour, 1 and 1 + 2**-6
    bits = bf16.to_bf16(a)
    assert bits.dtype == np.uint16 and bits.shape == (128, 33)  # 70 rows padded to a multiple of ROW_STEP
    np.testing.assert_array_equal(values(bits[:70]), rounded(a))
    np.testing.assert_array_equal(values(bits[0, :4]), [1.0, 1 + 2**-6, -1.0, 0.0])
    assert (bits[70:] == 0).all()


@needs_units
def test_products_are_the_float64_products_of_the_rounded_rows_to_float32_sums():
    a, b = unit(300, 384, seed=1), unit(1000, 384, seed=2)
    got = bf16.products(bf16.to_bf16(a), bf16.to_bf16(b), 300, 1000)
    want = rounded(a) @ rounded(b).T
    assert got.shape == (300, 1000) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=384 * 2**-24)
    assert np.abs(got - a.astype(np.float64) @ b.T.astype(np.float64)).max() > 1e-4  # bf16, not float32


@needs_units
@pytest.mark.parametrize("d", [16, 384, 1024])
def test_the_margin_bounds_a_products_error_even_where_every_rounding_goes_one_way(d):
    """A unit row whose every element bf16 rounds down by nearly the most it can (2**-8 of
    itself): its product with itself comes near the bound, and stays under it; so do random rows'."""
    powers, room = [], 0.99
    for left in range(d, 0, -1):  # powers of two, the largest first, their squares summing to about 0.99
        powers.append(2.0 ** np.floor(np.log2(np.sqrt(room - (left - 1) * 4.0**-30))))
        room -= powers[-1] ** 2
    worst = (np.array(powers) * (1 + 2**-8 * 0.998)).astype(np.float32)  # 1.00000001b x 2^e: rounds down
    rows = np.concatenate([worst[None, :], unit(500, d, seed=d)])
    got = bf16.products(bf16.to_bf16(rows), bf16.to_bf16(rows), len(rows), len(rows))
    error = np.abs(got - rows.astype(np.float64) @ rows.T.astype(np.float64))
    assert error.max() <= bf16.margin(d)
    assert error[0, 0] > 0.4 * bf16.margin(d)  # the bound is near what rounding can do


@needs_units
def test_the_search_on_bf16_units_keeps_the_lists_and_float32_values_of_float32_products():
    x = unit(6000, 64, seed=3, topics=30)
    centers = x[::100]
    want_ids, want_sims = topk_clustered(x, 12, centers, probes=6)
    ids, sims = topk_clustered(x, 12, centers, probes=6, bf16=True)
    exact = np.einsum("ij,ikj->ik", x.astype(np.float64), x[ids].astype(np.float64))
    np.testing.assert_allclose(sims, exact, atol=2e-6)  # float32 values, not bf16 ones (off by ~1e-3)
    np.testing.assert_allclose(sims, want_sims, atol=2e-6)
    assert np.mean((ids == want_ids).all(axis=1)) > 0.99  # differ only between near-equal similarities


@needs_units
def test_probe_lists_on_bf16_units_are_the_nearest_centres_by_float64_up_to_rounding():
    x = unit(3000, 48, seed=4, topics=20)
    centers = unit(200, 48, seed=5)
    probed = probe_lists(x, centers, 8, gap=0.2, bf16=True)
    s = x.astype(np.float64) @ centers.T.astype(np.float64)
    order = np.argsort(-s, axis=1, kind="stable")[:, :8]
    kept = s[np.arange(3000)[:, None], order] >= s[np.arange(3000), order[:, 0]][:, None] - 0.2
    want = np.where(kept, order, 200)
    assert np.mean((probed == want).all(axis=1)) > 0.995
    nearest = probe_lists(x, centers, 1, bf16=True)[:, 0]
    np.testing.assert_array_equal(s[np.arange(3000), nearest], s.max(axis=1))
