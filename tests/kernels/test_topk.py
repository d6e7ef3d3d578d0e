"""Top-K neighbours: exact against numpy.argpartition, clustered against exact (recall floor)."""

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from chunktree.kernels import bf16 as bf16_units
from chunktree.kernels.topk import topk_clustered, topk_exact


def unit(n, d, seed=0, topics=None):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    if topics:
        x = 0.8 * rng.standard_normal((topics, d))[rng.integers(0, topics, n)] + x / np.sqrt(d) * 2
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def reference_topk(x, k):
    s = x.astype(np.float64) @ x.T.astype(np.float64)
    np.fill_diagonal(s, -np.inf)
    return np.sort(s, axis=1)[:, ::-1][:, :k]


@pytest.mark.parametrize("n, k, block", [(50, 1, 7), (300, 10, 64), (1000, 32, 1024)])
def test_exact_matches_reference(n, k, block):
    x = unit(n, 24, seed=n)
    ids, sims = topk_exact(x, k, block=block)
    want = reference_topk(x, k)
    np.testing.assert_allclose(sims, want, atol=1e-5)  # compare values: ties make ids non-unique
    np.testing.assert_allclose(sims, np.sum(x[ids] * x[:, None, :], axis=2), atol=1e-5)
    assert (ids != np.arange(n)[:, None]).all()
    assert (np.diff(sims, axis=1) <= 0).all()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 80), d=st.integers(1, 16), seed=st.integers(0, 2**16), data=st.data())
def test_exact_matches_reference_for_any_shape_and_block(n, d, seed, data):
    k, block = data.draw(st.integers(1, n - 1)), data.draw(st.integers(1, 100))
    x = unit(n, d, seed=seed)
    ids, sims = topk_exact(x, k, block=block)
    np.testing.assert_allclose(sims, reference_topk(x, k), atol=1e-5)
    assert (ids != np.arange(n)[:, None]).all()


def test_exact_with_duplicates_excludes_only_self():
    x = np.repeat(unit(10, 8), 2, axis=0)
    ids, sims = topk_exact(x, 1)
    assert (ids[:, 0] == np.arange(20) ^ 1).all()  # each row's twin
    np.testing.assert_allclose(sims[:, 0], 1.0, atol=1e-6)


def test_clustered_recall_floor():
    x = unit(4000, 32, seed=1, topics=40)
    exact_ids, _ = topk_exact(x, 10)
    rng = np.random.default_rng(0)
    centers = x[rng.choice(4000, 120, replace=False)]
    ids, sims = topk_clustered(x, 10, centers, probes=12)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids.tolist(), exact_ids.tolist())])
    assert recall >= 0.9, recall
    assert (ids != np.arange(4000)[:, None]).all()
    ok = ids >= 0
    np.testing.assert_allclose(sims[ok], np.sum(x[np.where(ok, ids, 0)] * x[:, None, :], axis=2)[ok], atol=1e-5)


def test_clustered_with_all_clusters_probed_is_exact():
    x = unit(500, 16, seed=2)
    centers = x[:20]
    _, sims = topk_clustered(x, 8, centers, probes=20)
    np.testing.assert_allclose(sims, reference_topk(x, 8), atol=1e-5)


def test_clustered_pads_when_too_few_candidates():
    x = unit(30, 8, seed=3)
    ids, sims = topk_clustered(x, 40, x[:3], probes=3)
    assert (ids[:, 29:] == -1).all() and np.isneginf(sims[:, 29:]).all()
    assert (np.sort(ids[:, :29], axis=1) == np.array([[j for j in range(30) if j != i] for i in range(30)])).all()


@pytest.mark.parametrize("bf16", [False, pytest.param(True, marks=pytest.mark.skipif(
    not bf16_units.available(), reason="this CPU has no bf16 units OpenVINO lists"))])
@pytest.mark.parametrize("threads", [2, 3, 7])
def test_clustered_lists_do_not_depend_on_the_threads(threads, bf16):
    """The clusters shared out among threads, each with lists of its own, merged: bit for bit the
    lists of one thread, even with ties (duplicated rows); with float32 or bf16 products."""
    from chunktree.kernels.topk import ClusterIndex, probe_lists, search_rows

    x = unit(2000, 16, seed=8, topics=50)
    x[1000:1100] = x[:100]  # exact ties
    centers = x[::50]
    probed = probe_lists(x, centers, 6, bf16=bf16)
    clusters = ClusterIndex.build(probed[:, 0], centers.shape[0])
    rows = np.arange(2000)
    one = search_rows(x, rows, probed, clusters, 12, block=128, threads=1, bf16=bf16)
    many = search_rows(x, rows, probed, clusters, 12, block=128, threads=threads, bf16=bf16)
    np.testing.assert_array_equal(many[0], one[0])
    np.testing.assert_array_equal(many[1], one[1])


def test_merged_lists_are_the_best_k_of_both_by_similarity_then_id():
    from chunktree.kernels.topk import _merge_lists

    rng = np.random.default_rng(4)
    k, m = 6, 200
    pool_sims = rng.integers(0, 5, (m, 2 * k)).astype(np.float32) / 4  # many ties
    pool_ids = np.stack([rng.permutation(50)[:2 * k] for _ in range(m)])
    pool_ids[:20, 3:] = -1  # short lists end in -1 / -inf
    pool_sims[:20, 3:] = -np.inf

    def sorted_best(ids, sims):
        order = np.lexsort((np.where(ids < 0, 1 << 40, ids), -sims), axis=1)[:, :k]
        return np.take_along_axis(ids, order, 1), np.take_along_axis(sims, order, 1)

    a_ids, a_sims = sorted_best(pool_ids[:, :k], pool_sims[:, :k])
    b_ids, b_sims = sorted_best(pool_ids[:, k:], pool_sims[:, k:])
    want_ids, want_sims = sorted_best(pool_ids, pool_sims)
    _merge_lists(a_ids, a_sims, b_ids, b_sims)
    np.testing.assert_array_equal(a_sims, want_sims)
    real = np.isfinite(want_sims)
    np.testing.assert_array_equal(a_ids[real], want_ids[real])


def fuzzy(n=3000, d=24, topics=600, seed=5):
    return unit(n, d, seed=seed, topics=topics)


def test_with_reverse_lists_the_rows_that_point_back_most_similar_first():
    from chunktree.kernels.topk import with_reverse

    x = fuzzy(400)
    ids, sims = topk_exact(x, 5)
    sims = np.round(sims, 2)  # ties: the lower id first
    g = with_reverse(ids, sims, 3)
    assert g.shape == (400, 8) and (g[:, :5] == ids).all()
    for i in range(400):
        pointing = [(-float(sims[j][ids[j] == i][0]), j) for j in np.flatnonzero((ids == i).any(axis=1)).tolist()]
        want = [j for _, j in sorted(pointing)[:3]]  # all of them when fewer than 3
        assert [j for j in g[i, 5:].tolist() if j >= 0] == want, i


def test_refinement_only_improves_lists_and_keeps_them_valid():
    from chunktree.kernels.topk import refine_with_neighbours_of_neighbours, with_reverse

    x = fuzzy()
    rng = np.random.default_rng(0)
    centers = x[rng.choice(len(x), 60, replace=False)]
    ids, sims = topk_clustered(x, 10, centers, probes=2)
    exact_ids, exact_sims = topk_exact(x, 10)

    def recall(lists):
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(lists.tolist(), exact_ids.tolist())])

    graph = with_reverse(ids, sims, 8)
    new_ids, new_sims, changed = refine_with_neighbours_of_neighbours(x, ids, sims, graph, np.ones(graph.shape, bool))
    assert changed > 0 and recall(new_ids) > recall(ids) + 0.1, (recall(ids), recall(new_ids))
    assert (new_sims >= sims - 1e-6).all()  # every rank at least as good as before
    assert (np.diff(new_sims, axis=1) <= 0).all() and (new_ids != np.arange(len(x))[:, None]).all()
    assert all(len(set(r)) == 10 for r in new_ids.tolist())
    np.testing.assert_allclose(new_sims, np.sum(x[new_ids] * x[:, None, :], axis=2), atol=1e-5)
    # Exact lists are a fixed point.
    exact_graph = with_reverse(exact_ids, exact_sims, 8)
    _, _, none = refine_with_neighbours_of_neighbours(x, exact_ids, exact_sims, exact_graph,
                                                      np.ones(exact_graph.shape, bool))
    assert none == 0


def test_a_pass_that_skips_pairs_scored_before_gives_the_same_lists():
    from chunktree.kernels.topk import fresh_entries, refine_with_neighbours_of_neighbours, with_reverse

    x = fuzzy()
    rng = np.random.default_rng(0)
    ids, sims = topk_clustered(x, 10, x[rng.choice(len(x), 60, replace=False)], probes=2)
    first = with_reverse(ids, sims, 8)
    ids, sims, _ = refine_with_neighbours_of_neighbours(x, ids, sims, first, np.ones(first.shape, bool))
    second = with_reverse(ids, sims, 8)
    fresh = fresh_entries(second, first)
    assert 0 < fresh.mean() < 1
    assert all(not fresh[i, a] == (second[i, a] in first[i].tolist()) for i in range(50) for a in range(18))
    skipped = refine_with_neighbours_of_neighbours(x, ids, sims, second, fresh)
    full = refine_with_neighbours_of_neighbours(x, ids, sims, second, np.ones(second.shape, bool))
    np.testing.assert_array_equal(skipped[0], full[0])
    np.testing.assert_array_equal(skipped[1], full[1])
    assert skipped[2] == full[2] > 0


def test_a_pass_keeps_the_best_k_of_each_rows_list_and_the_rows_sharing_a_graph_row_with_it():
    """Against a reference pass in float64 sets: the new list of row i is the best k of its own
    list and of every row that shares a row of the graph with it (i itself left out)."""
    from chunktree.kernels.topk import refine_with_neighbours_of_neighbours, with_reverse

    x = fuzzy(n=600)
    rng = np.random.default_rng(1)
    ids, sims = topk_clustered(x, 8, x[rng.choice(600, 30, replace=False)], probes=1)
    graph = with_reverse(ids, sims, 4)
    # Blocks of 7 graph rows: the lists change between blocks, and the result must not.
    new_ids, new_sims, _ = refine_with_neighbours_of_neighbours(x, ids, sims, graph, np.ones(graph.shape, bool), block=7)
    x64 = x.astype(np.float64)
    meets = [set() for _ in range(600)]
    for row in graph.tolist():
        members = {c for c in row if c >= 0}
        for a in members:
            meets[a] |= members
    for i in range(600):
        reach = (meets[i] | {c for c in ids[i] if c >= 0}) - {i}
        cand = np.array(sorted(reach))
        s = x64[cand] @ x64[i]
        best = np.sort(s)[::-1]
        np.testing.assert_allclose(new_sims[i], np.pad(best[:8], (0, max(0, 8 - best.size)), constant_values=-np.inf),
                                   atol=1e-5)
        if (-np.diff(best[:9]) > 1e-5).all():  # no near-ties: the ids are determined
            want = cand[np.lexsort((cand, -s))[:8]]
            np.testing.assert_array_equal(new_ids[i][:want.size], want)


def test_a_pass_gives_the_same_lists_on_any_number_of_threads_and_blocks():
    import numba

    from chunktree.kernels.topk import refine_with_neighbours_of_neighbours, with_reverse

    x = fuzzy()
    rng = np.random.default_rng(2)
    ids, sims = topk_clustered(x, 10, x[rng.choice(len(x), 60, replace=False)], probes=2)
    graph = with_reverse(ids, sims, 8)
    fresh = np.ones(graph.shape, bool)
    want = refine_with_neighbours_of_neighbours(x, ids, sims, graph, fresh)
    threads = numba.get_num_threads()
    try:
        for t, block in ((1, 2048), (1, 5), (threads, 333)):
            numba.set_num_threads(t)
            got = refine_with_neighbours_of_neighbours(x, ids, sims, graph, fresh, block=block)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            assert got[2] == want[2]
    finally:
        numba.set_num_threads(threads)
