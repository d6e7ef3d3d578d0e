"""Prim's maximum spanning tree against scipy and networkx."""

import hypothesis.strategies as st
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from scipy.sparse.csgraph import minimum_spanning_tree

from chunktree.kernels.prim import prim_max_spanning_tree
from chunktree.kernels.similarity import similarity_matrix


def unit(n, d, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def scipy_max_tree_weight(sim):
    # Negate (as 2 - s > 0: scipy reads 0 as "no edge") and take the minimum spanning tree.
    w = 2.0 - sim.astype(np.float64)
    np.fill_diagonal(w, 0)
    mst = minimum_spanning_tree(w)
    return 2.0 * mst.nnz - mst.sum()


def check_tree(parent, weight, sim, root):
    n = len(parent)
    assert parent[root] == -1 and (np.delete(parent, root) >= 0).all()
    for v in range(n):  # every vertex reaches the root, no cycles
        seen, u = 0, v
        while u != root:
            u = parent[u]
            seen += 1
            assert seen < n
    others = np.flatnonzero(parent >= 0)
    np.testing.assert_array_equal(weight[others], sim[others, parent[others]])


@pytest.mark.parametrize("n, d, root", [(2, 4, 0), (3, 4, 2), (10, 8, 5), (300, 16, 17), (1000, 64, 999)])
def test_weight_equals_scipy(n, d, root):
    sim = similarity_matrix(unit(n, d, seed=n))
    parent, weight = prim_max_spanning_tree(sim, root)
    check_tree(parent, weight, sim, root)
    assert weight.sum(dtype=np.float64) == pytest.approx(scipy_max_tree_weight(sim), rel=1e-6)


def test_weight_equals_networkx():
    sim = similarity_matrix(unit(40, 8, seed=3))
    g = nx.Graph()
    g.add_weighted_edges_from((i, j, float(sim[i, j])) for i in range(40) for j in range(i + 1, 40))
    want = sum(w for _, _, w in nx.maximum_spanning_tree(g).edges(data="weight"))
    _parent, weight = prim_max_spanning_tree(sim, 0)
    assert weight.sum(dtype=np.float64) == pytest.approx(want, rel=1e-6)


def test_hand_computed():
    sim = np.array([[1, .9, .1, .2],
                    [.9, 1, .8, .3],
                    [.1, .8, 1, .7],
                    [.2, .3, .7, 1]], dtype=np.float32)
    parent, weight = prim_max_spanning_tree(sim, 3)
    assert parent.tolist() == [1, 2, 3, -1]
    np.testing.assert_allclose(weight, [.9, .8, .7, 0])


def test_single_vertex():
    parent, weight = prim_max_spanning_tree(np.ones((1, 1), np.float32), 0)
    assert parent.tolist() == [-1] and weight.tolist() == [0.0]


def test_ties_go_to_the_lower_index():
    x = np.repeat(unit(5, 8), 3, axis=0)  # every vector three times
    sim = similarity_matrix(x)
    parent, weight = prim_max_spanning_tree(sim, 0)
    assert parent[1] == 0 and parent[2] == 0  # duplicates of the root attach to it
    # Cross-group ties go to the lowest index, so each group is first reached at its first copy,
    # and the other two copies attach to it (the lower-index tie again).
    for v in range(3, 15):
        if v % 3:
            assert parent[v] == v - v % 3
    assert weight.sum(dtype=np.float64) == pytest.approx(scipy_max_tree_weight(sim), rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 60), d=st.integers(2, 24), seed=st.integers(0, 2**16), data=st.data())
def test_weight_equals_scipy_for_any_shape_and_root(n, d, seed, data):
    sim = similarity_matrix(unit(n, d, seed=seed))
    root = data.draw(st.integers(0, n - 1))
    parent, weight = prim_max_spanning_tree(sim, root)
    check_tree(parent, weight, sim, root)
    assert weight.sum(dtype=np.float64) == pytest.approx(scipy_max_tree_weight(sim), rel=1e-6)


@pytest.mark.real_data
def test_real_embeddings(embedder):
    from chunktree import chunk_documents, sample_documents

    chunks = chunk_documents(sample_documents()[:20], embedder.tokenizer)
    sim = similarity_matrix(embedder.embed([c.text for c in chunks]))
    parent, weight = prim_max_spanning_tree(sim, 0)
    check_tree(parent, weight, sim, 0)
    assert weight.sum(dtype=np.float64) == pytest.approx(scipy_max_tree_weight(sim), rel=1e-6)


def test_blocked_similarity_equals_plain_product():
    x = unit(777, 32, seed=9)
    np.testing.assert_allclose(similarity_matrix(x, block=100), x.astype(np.float64) @ x.T, atol=1e-5)
