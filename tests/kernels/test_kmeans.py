"""K-means kernels against brute-force numpy."""

import numpy as np

from chunktree.kernels.kmeans import assign, center_sums, kmeans_plusplus


def data(n=500, d=16, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


def test_assign_matches_brute_force():
    x, c = data(), data(7, seed=1)
    labels, dist_sq = assign(x, c, block=64)
    full = ((x[:, None, :].astype(np.float64) - c[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(labels, full.argmin(axis=1))
    np.testing.assert_allclose(dist_sq, full.min(axis=1), rtol=1e-4, atol=1e-4)


def test_center_sums_match_add_at():
    x = data()
    labels = np.random.default_rng(2).integers(0, 9, len(x))
    sums, counts = center_sums(x, labels, 9)
    want = np.zeros((9, x.shape[1]))
    np.add.at(want, labels, x)
    np.testing.assert_allclose(sums, want, atol=1e-5)
    np.testing.assert_array_equal(counts, np.bincount(labels, minlength=9))


def test_kmeans_plusplus_distinct_seeds_on_duplicates():
    base = data(6, seed=3)
    x = np.repeat(base, 25, axis=0)  # 6 distinct vectors, 25 copies each
    for seed in range(5):
        idx = kmeans_plusplus(x, 6, np.random.default_rng(seed))
        assert len({tuple(v) for v in x[idx]}) == 6  # one seed per distinct vector
    idx = kmeans_plusplus(x, 10, np.random.default_rng(0))  # more seeds than distinct vectors
    assert len(set(idx.tolist())) == 10 and len({tuple(v) for v in x[idx]}) == 6


def test_kmeans_plusplus_is_seeded():
    x = data(300, seed=4)
    a = kmeans_plusplus(x, 12, np.random.default_rng(7))
    np.testing.assert_array_equal(a, kmeans_plusplus(x, 12, np.random.default_rng(7)))
    assert len(set(a.tolist())) == 12
