"""Joining a forest's components into one tree, against exhaustive searches of the full similarity matrix."""

import itertools
import re

import numpy as np
import pytest

from chunktree.kernels import join
from chunktree.kernels.forest import max_spanning_forest, orient_tree
from chunktree.kernels.join import JoinSettings, join_components

WHOLE = JoinSettings(exact_pairs=1 << 62)  # every pair searched over all its member pairs


def blobs(n, d, topics, seed):
    rng = np.random.default_rng(seed)
    x = 5 * rng.standard_normal((topics, d))[rng.integers(0, topics, n)] + rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def exact_blobs(n, d, topics, seed):
    """``blobs`` rounded to multiples of 1/64: every product of two rows is exact in float32, so
    it is the same bits whatever blocks BLAS multiplies them in (on AMD EPYC, OpenBLAS rounds a
    row's products differently in blocks of other shapes)."""
    return np.round(blobs(n, d, topics, seed) * 64).astype(np.float32) / np.float32(64)


@pytest.mark.parametrize("candidates", [1, 2])
def test_join_makes_one_tree_and_picks_best_cross_edges(candidates):
    x = blobs(300, 16, 12, seed=4)
    _, labels = np.unique(np.argmax(x @ x[[0, 100, 200]].T, axis=1), return_inverse=True)  # 3 parts
    labels = np.array([np.flatnonzero(labels == labels[i]).min() for i in range(300)])
    src, dst, w = join_components(x, labels, candidates=candidates)
    assert len(src) == 2
    np.testing.assert_allclose(w, np.sum(x[src] * x[dst], axis=1), atol=1e-6)
    parts = np.unique(labels)
    if candidates == 2:  # every pair of the 3 parts evaluated: the exact best joining
        s = x @ x.T
        best = [s[np.ix_(labels == parts[i], labels == parts[j])].max() for i, j in [(0, 1), (0, 2), (1, 2)]]
        assert w.sum() == pytest.approx(sum(sorted(best)[1:]), abs=1e-5)
    merged = labels.copy()
    for a, b in zip(src, dst):
        merged[merged == merged[b]] = merged[a]
    assert np.unique(merged).size == 1 and parts.size == 3


@pytest.mark.parametrize("per_row", [0, 2])
def test_join_many_singletons(per_row):
    x = blobs(64, 8, 4, seed=5)
    src, dst, w = join_components(x, np.arange(64), candidates=2, per_row=per_row)
    # A row searched against a singleton has one edge to offer: its spares hold that edge, never a
    # masked (-inf) second one.
    assert len(src) >= 63 and (len(src) > 63) == (per_row > 0)
    np.testing.assert_allclose(w, np.sum(x[src] * x[dst], axis=1), atol=1e-6)
    parent, _ = orient_tree(src[:63], dst[:63], w[:63], 64, 0)
    assert (parent[1:] >= 0).all()


def test_the_frontier_join_of_large_components_finds_the_exact_best_edges():
    """Components larger than the frontier: their best edge through each side's frontier equals the
    best edge of the exhaustive search, on topic blobs where the components are the topics."""
    x = blobs(3000, 24, 6, seed=7)
    centres = x[[np.flatnonzero(np.argmax(x @ x[:6].T, axis=1) == t)[0] for t in range(6)]]
    labels = np.argmax(x @ centres.T, axis=1)
    frontier = join_components(x, labels, candidates=5, settings=JoinSettings(frontier=64, exact_pairs=0))
    exact = join_components(x, labels, candidates=5, settings=WHOLE)
    assert len(frontier[0]) == len(exact[0]) == np.unique(labels).size - 1
    assert frontier[2].sum() >= 0.999 * exact[2].sum()


def test_frontiers_wider_than_their_components_take_them_whole():
    """A frontier asked for more rows than its component has is the whole component (no empty
    entries searched): the join of large components through such frontiers has the joining
    weight of the exhaustive join."""
    x = blobs(1500, 24, 5, seed=23)
    centres = x[[np.flatnonzero(np.argmax(x @ x[:5].T, axis=1) == t)[0] for t in range(5)]]
    labels = np.argmax(x @ centres.T, axis=1)  # components of 166 to 398 rows
    default = JoinSettings()
    assert (np.bincount(labels) > default.small_side).all() and (np.bincount(labels) <= default.kernel_side).all()
    wide = join_components(x, labels, candidates=4, settings=JoinSettings(frontier=4000, exact_pairs=0))
    exact = join_components(x, labels, candidates=4, settings=WHOLE)
    np.testing.assert_allclose(wide[2], np.sum(x[wide[0]] * x[wide[1]], axis=1), atol=1e-5)
    np.testing.assert_allclose(wide[2].sum(), exact[2].sum(), rtol=1e-6)


def test_small_components_joined_to_one_large_one_get_their_exact_best_edges(monkeypatch):
    """One large component paired with many small ones (fuzzy data's shape), every pair searched
    whole: the batched search gives the same joining edges as the best pair of the full
    similarity matrix for every pair."""
    x = blobs(1500, 16, 3, seed=11)
    labels = np.zeros(1500, dtype=np.int64)
    small = np.random.default_rng(3).choice(1500, 240, replace=False)
    labels[small] = 1 + np.arange(240) // 6  # 40 components of 6 rows inside one of 1,260
    full = x @ x.T

    def reference(x_, groups, centres, pairs, per_row, settings):
        out = []
        for g, h in pairs:
            sub = full[np.ix_(groups[g], groups[h])]
            i, j = np.unravel_index(np.argmax(sub), sub.shape)
            out.append((int(groups[g][i]), int(groups[h][j]), float(sub[i, j])))
        return out, (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32))

    got = join_components(x, labels, candidates=3, settings=WHOLE)  # merged small components stay searched whole
    monkeypatch.setattr(join, "_pair_edges", reference)
    want = join_components(x, labels, candidates=3, settings=WHOLE)
    assert len(got[0]) == 40
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[2], want[2], atol=1e-6)


def _small_topics_beside_a_large_component(seed):
    """Topic blobs (40 topics, 24 dims): six topics of at most the default small side's rows as
    components of their own, the other topics' rows one large component."""
    small_side = JoinSettings().small_side
    x = blobs(4000, 24, 40, seed=seed)
    centres = x[[np.flatnonzero(np.argmax(x @ x[:40].T, axis=1) == t)[0] for t in range(40)]]
    topic = np.argmax(x @ centres.T, axis=1)
    sizes = np.bincount(topic, minlength=40)
    small = [t for t in np.argsort(sizes).tolist() if 20 <= sizes[t] <= small_side][:6]
    labels = np.zeros(x.shape[0], dtype=np.int64)
    for i, t in enumerate(small):
        labels[topic == t] = i + 1
    assert len(small) == 6 and (labels == 0).sum() > 16 * small_side
    return x, labels


def test_a_reach_over_the_whole_large_side_is_the_exhaustive_join():
    """Small components against a large one through the large side's rows nearest them: where
    the reach holds all of the large side (so ``_reach_best`` takes it whole), the joining and spare
    edges are those of the exhaustive join by BLAS products."""
    x, labels = _small_topics_beside_a_large_component(seed=21)
    # No pair searched whole; then every pair by BLAS products of its whole sides.
    reach = join_components(x, labels, candidates=6, per_row=3, settings=JoinSettings(exact_pairs=0, reach=x.shape[0]))
    exact = join_components(x, labels, candidates=6, per_row=3, settings=JoinSettings(exact_pairs=1 << 62, reach=0))
    np.testing.assert_allclose(reach[2], np.sum(x[reach[0]] * x[reach[1]], axis=1), atol=1e-5)
    np.testing.assert_allclose(reach[2][:6].sum(), exact[2][:6].sum(), rtol=1e-6)
    spare = [sorted(zip(e[0][6:].tolist(), e[1][6:].tolist())) for e in (reach, exact)]
    assert spare[0] == spare[1]


def test_the_reach_of_small_topics_finds_nearly_the_exhaustive_weight():
    """With the default reach (far fewer rows than the large side), small topic components still
    get joining edges within 0.1% of the exhaustive join's weight; with each component's own
    exact tree, the spare edges make a spanning tree within 0.01% of the exhaustive join's."""
    from chunktree.kernels.prim import prim_max_spanning_tree

    x, labels = _small_topics_beside_a_large_component(seed=22)
    assert (labels == 0).sum() > 4 * JoinSettings().reach
    reach = join_components(x, labels, candidates=6, per_row=4, settings=JoinSettings(exact_pairs=0))
    exact = join_components(x, labels, candidates=6, per_row=4, settings=WHOLE)
    assert reach[2][:6].sum() >= 0.999 * exact[2][:6].sum()
    own = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        parent, pw = prim_max_spanning_tree(np.ascontiguousarray(x[members] @ x[members].T), np.int64(0))
        child = np.flatnonzero(parent >= 0)
        own.append((members[child], members[parent[child]], pw[child]))
    weights = []
    for joined in (reach, exact):
        src, dst, w = (np.concatenate([o[k] for o in own] + [joined[k]]) for k in range(3))
        taken, comps = max_spanning_forest(src, dst, w, x.shape[0])
        assert np.unique(comps).size == 1
        weights.append(w[taken].sum(dtype=np.float64))
    assert weights[0] >= (1 - 1e-4) * weights[1]


def test_spare_edges_are_each_rows_best_edges_into_the_other_side_and_only_add_weight():
    """per_row=2: each row of a small component also offers its best two edges into the large
    component (checked against the full similarity matrix); a spanning forest over the
    components' own trees and every returned edge is one tree, at least as heavy as the one the
    joining edges alone make and no heavier than the exact maximum spanning tree."""
    from chunktree.kernels.prim import prim_max_spanning_tree

    x = blobs(1500, 16, 3, seed=11)
    labels = np.zeros(1500, dtype=np.int64)
    small = np.random.default_rng(3).choice(1500, 240, replace=False)
    labels[small] = 1 + np.arange(240) // 6
    full = x @ x.T
    big = np.flatnonzero(labels == 0)
    everything = join_components(x, labels, candidates=40, per_row=2)  # every pair searched in one round
    src, dst, w = everything
    np.testing.assert_allclose(w, np.sum(x[src] * x[dst], axis=1), atol=1e-5)
    assert (labels[src] != labels[dst]).all()
    spare_src, spare_dst = src[40:], dst[40:]  # after the 40 joining edges
    for r in small.tolist():
        offered = set(spare_dst[spare_src == r].tolist())
        assert set(big[np.argsort(-full[r, big])[:2]].tolist()) <= offered

    # Each component's own tree: the exact tree of its members.
    own_src, own_dst, own_w = [], [], []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        parent, pw = prim_max_spanning_tree(np.ascontiguousarray(full[np.ix_(members, members)]), np.int64(0))
        child = np.flatnonzero(parent >= 0)
        own_src.append(members[child]), own_dst.append(members[parent[child]]), own_w.append(pw[child])
    own = [np.concatenate(a) for a in (own_src, own_dst, own_w)]

    def tree_weight(j):
        s_, d_, w_ = (np.concatenate([a, b]) for a, b in zip(own, j))
        taken, comps = max_spanning_forest(s_, d_, w_, 1500)
        assert taken.size == 1499 and np.unique(comps).size == 1
        return w_[taken].sum(dtype=np.float64)

    plain = tree_weight(join_components(x, labels, candidates=3))
    spared = tree_weight(join_components(x, labels, candidates=3, per_row=2))
    exact = prim_max_spanning_tree(full, np.int64(0))[1].sum(dtype=np.float64)
    assert plain < spared <= exact + 1e-4


@pytest.mark.parametrize("column_block, row_step", [(7, 64), (50, 1024), (1 << 15, 256), (7, 16)])
def test_best_edges_into_matches_the_full_product_over_any_blocking(column_block, row_step):
    """Each row's best 3 columns, merged over blocks of columns and rows, equal the top 3 of the
    full similarity matrix; fewer columns than asked leave -1 / -inf."""
    settings = JoinSettings(column_block=column_block, row_step=row_step)
    x = blobs(400, 12, 5, seed=13)
    rng = np.random.default_rng(2)
    rows, cols = rng.choice(400, 150, replace=False), rng.choice(400, 230, replace=False)
    ids, sims = join._best_edges_into(x, x[rows], cols, 3, settings)
    full = x[rows] @ x[cols].T
    want = np.argsort(-full, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(ids, cols[want])
    np.testing.assert_allclose(sims, np.take_along_axis(full, want, axis=1), atol=1e-6)
    ids, sims = join._best_edges_into(x, x[rows[:4]], cols[:2], 3, settings)
    assert (ids[:, 2] == -1).all() and np.isneginf(sims[:, 2]).all() and (ids[:, :2] >= 0).all()


@pytest.mark.parametrize("m", [5, 300, 1200])
def test_merged_blocks_keep_each_rows_best_scores_ties_to_the_earlier_column(m):
    """_keep_best_columns over several blocks of columns (wider and narrower than its chunks, with many
    equal products), then ranked, keeps what a lexsort of the whole row by (-score, column) keeps
    first: for a few kept, as many as a block, and more than the row has (the rest -1 / -inf)."""

    rng = np.random.default_rng(9)
    y = rng.integers(-40, 40, (37, 1000)).astype(np.float32)
    pos = np.full((37, m), -1, np.int64)
    score = np.full((37, m), -np.inf, np.float32)
    for c0, c1 in ((0, 300), (300, 301), (301, 1000)):
        join._keep_best_columns(np.ascontiguousarray(y[:, c0:c1]), c0, pos, score)
    pos, score = join._ranked(pos, score)
    want = np.lexsort((np.broadcast_to(np.arange(1000), y.shape), -y), axis=1)[:, :m]
    np.testing.assert_array_equal(pos[:, :want.shape[1]], want)
    np.testing.assert_array_equal(score[:, :want.shape[1]], np.take_along_axis(y, want, axis=1))
    assert (pos[:, 1000:] == -1).all() and np.isneginf(score[:, 1000:]).all()


def test_searches_shared_among_threads_equal_each_search_alone():
    """_searched cuts its jobs into parts and runs them on threads: every job's result is bit for
    bit _best_edges_into's over the job's whole rows, for jobs of very different sizes."""

    x = exact_blobs(3000, 16, 8, seed=5)
    rng = np.random.default_rng(6)
    jobs = [(x, rng.choice(3000, 2500, replace=False), rng.choice(3000, 900, replace=False), 4),
            (x, rng.choice(3000, 3, replace=False), rng.choice(3000, 50, replace=False), 2),
            (x[:40], np.arange(40), rng.choice(3000, 1200, replace=False), 256)]
    for (vectors, rows, cols, per), (ids, sims) in zip(jobs, join._searched(x, jobs)):
        want_ids, want_sims = join._best_edges_into(x, vectors[rows], cols, per)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(sims, want_sims)


def test_first_maxima_of_segments():
    """Each segment's first maximum, as np.argmax of the segment (ties to the first)."""
    from chunktree.kernels.join import _first_maxima

    rng = np.random.default_rng(7)
    values = rng.integers(0, 4, 500).astype(np.float32)
    values[:3] = -np.inf
    starts = np.concatenate([[0], np.sort(rng.choice(np.arange(1, 500), 60, replace=False)), [500]])
    want = [a + int(np.argmax(values[a:b])) for a, b in itertools.pairwise(starts)]
    np.testing.assert_array_equal(_first_maxima(values, starts), want)


@pytest.mark.parametrize("column_block", [7, 64, 1 << 15])
def test_nearest_members_are_the_most_similar_rows_ties_to_the_earlier(column_block):
    """Each vector's k most similar rows, kept over blocks of columns, are the first k of a
    stable argsort of its similarities (equal ones to the earlier row, with many duplicate
    rows), in the order of the columns; asked for more than there are, all of them."""
    x = exact_blobs(300, 12, 4, seed=8)
    x[150:] = x[:150]  # every row twice: equal similarities
    rng = np.random.default_rng(1)
    vectors, cols = x[rng.choice(300, 40, replace=False)], rng.choice(300, 220, replace=False)
    for k in (1, 16, 219, 220, 500):
        (got,) = join._nearest_members(x, vectors, cols, k, JoinSettings(column_block=column_block))
        want = np.sort(np.argsort(-(vectors @ x[cols].T), axis=1, kind="stable")[:, :k], axis=1)
        np.testing.assert_array_equal(got, cols[want])


def test_partners_are_the_nearest_centroid_and_the_highest_mean_similarities():
    """Each component is paired with the component of the nearest centroid and the two of the
    highest mean similarity between their members, both taken from the full similarity matrix."""

    x = blobs(600, 16, 5, seed=3)
    labels = np.random.default_rng(4).integers(0, 30, 600)
    labels[:30] = np.arange(30)  # no component empty
    full = x.astype(np.float64) @ x.T.astype(np.float64)
    groups = [np.flatnonzero(labels == g) for g in range(30)]
    mean = np.array([[full[np.ix_(a, b)].mean() for b in groups] for a in groups])
    centroids = np.array([x[a].sum(axis=0) for a in groups], dtype=np.float64)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    cosine = centroids @ centroids.T
    np.fill_diagonal(mean, -np.inf)
    np.fill_diagonal(cosine, -np.inf)
    want = sorted({(min(g, h), max(g, h)) for g in range(30)
                   for h in [int(np.argmax(cosine[g]))] + np.argsort(-mean[g])[:2].tolist()})
    sums = np.array([x[a].sum(axis=0) for a in groups], dtype=np.float64)
    assert join._partners(sums, np.array([a.size for a in groups]), 2) == want


def test_after_load_kernels_a_join_compiles_nothing():
    """In a fresh process, load_kernels compiles (or loads) every kernel a join runs: a join of
    another shape after it (a large component, mid-sized ones, many small ones; writable and
    read-only vectors) adds no compiled signature to any of the module's kernels."""
    import subprocess
    import sys

    script = """
import numba, numpy as np
from chunktree.kernels import join
join.load_kernels()
kernels = {name: f for name, f in vars(join).items() if isinstance(f, numba.core.registry.CPUDispatcher)}
before = {name: len(f.signatures) for name, f in kernels.items()}
rng = np.random.default_rng(1)
x = rng.standard_normal((6000, 16)).astype(np.float32)
x /= np.linalg.norm(x, axis=1, keepdims=True)
labels = np.concatenate([np.zeros(4000, np.int64), np.repeat([1, 2], 300), 3 + np.arange(1400) // 20])
join.join_components(x, labels, per_row=4)
x.flags.writeable = False
join.join_components(x, labels, per_row=4)
after = {name: len(f.signatures) for name, f in kernels.items()}
assert after == before, (before, after)
print(sorted(before))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "_above" in done.stdout and "_reach_best" in done.stdout


@pytest.mark.parametrize("block", [1, 7, 50, 1 << 24])
def test_partners_in_blocks_are_those_of_the_whole_similarity_matrix(block):
    """The partners of each component: the nearest centroid by cosine and the two of the highest
    mean similarity, computed here from the whole matrix, equal whatever block of rows the kernel
    holds at once."""
    from chunktree.kernels.join import _partners

    rng = np.random.default_rng(3)
    sums = rng.standard_normal((40, 16)) * rng.uniform(0.5, 3.0, (40, 1))
    sizes = rng.integers(1, 50, 40)
    means = (sums / sizes[:, None]).astype(np.float32)
    sims = means.astype(np.float64) @ means.T.astype(np.float64)
    np.fill_diagonal(sims, -np.inf)
    cosine = sims / np.linalg.norm(means, axis=1)[None, :]
    want = set()
    for g in range(40):
        for h in [int(np.argmax(cosine[g])), *np.argsort(sims[g])[-2:].tolist()]:
            want.add((min(g, h), max(g, h)))
    assert _partners(sums, sizes, 2, block=block) == sorted(want)


@pytest.mark.parametrize("gather", [1, 40, 10_000])
def test_float16_searches_gathered_in_batches_find_what_one_batch_finds(gather):
    """However few float16 rows are copied to float32 at once, every search finds the same best
    edges, and they are the exact best edges of its rows against its front."""
    from chunktree.kernels.join import _kernel_searched

    rng = np.random.default_rng(5)
    x = rng.standard_normal((600, 24)).astype(np.float16)
    x /= np.linalg.norm(x.astype(np.float32), axis=1, keepdims=True).astype(np.float16)
    searches = [(rng.choice(600, rng.integers(1, 30), replace=False), rng.choice(600, rng.integers(1, 50), replace=False))
                for _ in range(25)]
    _, starts, ids, sims = _kernel_searched(x, x, searches, 3, gather=gather)
    want = _kernel_searched(x, x, searches, 3, gather=1 << 20)
    np.testing.assert_array_equal(ids, want[2])
    np.testing.assert_array_equal(sims, want[3])
    xf = x.astype(np.float32)
    for s, (r, front) in enumerate(searches):
        exact = xf[r] @ xf[front].T
        best = np.sort(exact, axis=1)[:, ::-1][:, :3]
        got = sims[starts[s]:starts[s + 1], :min(3, front.size)]
        np.testing.assert_allclose(got, best[:, :min(3, front.size)], atol=1e-5)


def test_join_says_each_round_with_the_components_it_leaves():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = np.arange(300) // 3  # 100 components of three rows
    lines = []
    join_components(x, labels, said=lambda line, took: lines.append((line, took)))
    counts = [(int(a.replace(",", "")), int(b.replace(",", ""))) for a, b in
              (re.search(r"round \d+: ([\d,]+) -> ([\d,]+) components", line).groups() for line, _ in lines)]
    assert counts[0][0] == 100 and counts[-1][1] == 1
    assert all(b <= a // 2 for a, b in counts) and all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(counts))
    assert all(took >= 0 for _, took in lines)
