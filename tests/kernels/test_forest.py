"""Spanning forest (Kruskal), the descending sort of its edges and tree orientation, against scipy and numpy."""

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree

from chunktree.kernels.forest import descending, kruskal, max_spanning_forest, orient_tree


def random_graph(n, m, seed):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = src != dst
    return src[keep], dst[keep], rng.random(keep.sum()).astype(np.float32)


def scipy_forest_weight(src, dst, w, n):
    # Maximum forest = minimum forest on (2 - w) > 0; keep the heaviest of parallel edges.
    best = {}
    for a, b, x in zip(src.tolist(), dst.tolist(), w.tolist()):
        key = (min(a, b), max(a, b))
        best[key] = max(best.get(key, -1.0), x)
    rows, cols = zip(*best)
    g = coo_matrix((2.0 - np.array(list(best.values())), (rows, cols)), shape=(n, n)).tocsr()
    mst = minimum_spanning_tree(g)
    return 2.0 * mst.nnz - mst.sum()


@pytest.mark.parametrize("n, m, seed", [(10, 30, 0), (200, 300, 1), (500, 5000, 2)])
def test_forest_weight_and_components_match_scipy(n, m, seed):
    src, dst, w = random_graph(n, m, seed)
    taken, labels = max_spanning_forest(src, dst, w, n)
    assert w[taken].sum(dtype=np.float64) == pytest.approx(scipy_forest_weight(src, dst, w, n), rel=1e-6)
    g = coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    n_comp, comp = connected_components(g, directed=False)
    assert len(taken) == n - n_comp and np.unique(labels).size == n_comp
    for c in range(n_comp):  # same partition; labels are each component's smallest vertex
        members = np.flatnonzero(comp == c)
        assert (labels[members] == members.min()).all()


def test_kruskal_with_no_edges():
    taken, labels = kruskal(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), 3)
    assert taken.size == 0 and labels.tolist() == [0, 1, 2]


def test_orient_tree():
    #   0 - 1 - 2
    #       |
    #       3
    src, dst = np.array([0, 1, 3]), np.array([1, 2, 1])
    w = np.array([.5, .6, .7], np.float32)
    parent, pw = orient_tree(src, dst, w, 4, 2)
    assert parent.tolist() == [1, 2, -1, 1]
    np.testing.assert_allclose(pw, [.5, .6, 0, .7])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_descending_is_a_stable_argsort_of_the_negated_weights(dtype):
    """Edges by descending weight, equal weights in edge order, as numpy's stable argsort of
    -weight gives them: with many ties, both zeros, infinities, tiny and negative weights."""
    rng = np.random.default_rng(4)
    special = np.array([-1.5, -0.0, 0.0, 0.25, 1e-30, -1e-30, np.inf, -np.inf, 3.0], dtype)
    for w in (rng.choice(special, 2000), rng.standard_normal(2000).astype(dtype), np.empty(0, dtype)):
        np.testing.assert_array_equal(descending(w), np.argsort(-w, kind="stable"))
