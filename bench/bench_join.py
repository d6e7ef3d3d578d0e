"""Joining the top-K forest's components: time and joining weight of ``join_components`` against
its exhaustive reference (every pair it chose searched in full), in the same run, with the
top-K search and the forest timed beside it for the share; and on fuzzy data (a topic per 20
rows at n = 20,000, 50,000 and n / 3, and `chunktree scale`'s 1,000 topics at 30,000), where
hundreds of small components pair with one that holds most rows, the share of the tree time,
the tree's weight against the exhaustive join's and, up to n = 50,000, the joining weight against
the best joining tree's (every pair of components searched in full).

    python -m pytest bench/bench_join.py                                  # n = 300,000; fuzzy 20k, 30k, 50k, 100k
    CHUNKTREE_BENCH_JOIN_N=1000000 python -m pytest bench/bench_join.py  # about 8 minutes

Goal (issues 13 and 29, reported, not asserted): joining <= 10% of the tree time at every size.
"""

import os
import time

import numpy as np
import pytest
from conftest import summary

from chunktree.engine.datasets import synthetic_embeddings
from chunktree.engine.order import DEFAULT_K, DEFAULT_PROBES, JOIN_PER_ROW, sparse_neighbours
from chunktree.kernels import forest, join

N = int(os.environ.get("CHUNKTREE_BENCH_JOIN_N", 300_000))
FUZZY = [(20_000, 1_000), (30_000, 1_000), (50_000, 2_500), (N // 3, N // 60)]  # (n, topics)
EXHAUSTIVE = join.JoinSettings(exact_pairs=1 << 62)  # every pair searched over all its member pairs
BEST_MAX_N = 50_000  # the best joining tree searches all n^2 / 2 pairs


@pytest.fixture(autouse=True)
def _kernels():
    """The join's kernels loaded before any join is timed."""
    join.load_kernels()


def _forest(x):
    """The component labels of the top-K forest of ``x``, its edges (src, dst, weight), and the
    seconds of the top-K search and of the forest."""
    n = x.shape[0]
    t0 = time.perf_counter()
    ids, sims = sparse_neighbours(x, DEFAULT_K, round(2 * np.sqrt(n)), DEFAULT_PROBES, 0)
    t_knn = time.perf_counter() - t0
    valid = ids.ravel() >= 0
    src = np.repeat(np.arange(n, dtype=np.int64), DEFAULT_K)[valid]
    t0 = time.perf_counter()
    dst, w = ids.ravel()[valid], sims.ravel()[valid]
    taken, labels = forest.max_spanning_forest(src, dst, w, n)
    return labels, (src[taken], dst[taken], w[taken]), t_knn, time.perf_counter() - t0


def _tree_weight(edges, joined, n):
    """The weight of the spanning tree over the forest's edges and the joining and spare edges."""
    src, dst, w = (np.concatenate([a, b]) for a, b in zip(edges, joined))
    taken, _ = forest.max_spanning_forest(src, dst, w, n)
    return float(w[taken].sum(dtype=np.float64))


def test_join(results):
    x = synthetic_embeddings(N, seed=0)
    labels, edges, t_knn, t_forest = _forest(x)
    t0 = time.perf_counter()
    joined = join.join_components(x, labels, per_row=JOIN_PER_ROW)
    t_join = time.perf_counter() - t0
    t0 = time.perf_counter()
    exhaustive = join.join_components(x, labels, per_row=JOIN_PER_ROW, settings=EXHAUSTIVE)
    t_exhaustive = time.perf_counter() - t0
    c = int(np.unique(labels).size)
    results["join"] = {"n": N, "components": c, "knn": t_knn, "forest": t_forest,
                       "join": t_join, "exhaustive": t_exhaustive, "weight": float(joined[2][:c - 1].sum()),
                       "exhaustive_weight": float(exhaustive[2][:c - 1].sum()),
                       "tree": _tree_weight(edges, joined, N), "exhaustive_tree": _tree_weight(edges, exhaustive, N)}


def _best_joining_weight(x, labels):
    """The weight of the best joining tree: a maximum spanning tree over the components, each
    pair weighted by its best edge, from every pair of rows (in blocks of 2,048 rows)."""
    comps, inverse = np.unique(labels, return_inverse=True)
    c = comps.size
    by_component = np.argsort(inverse, kind="stable")
    xs, ls = x[by_component], inverse[by_component]
    starts = np.searchsorted(ls, np.arange(c))
    best = np.full((c, c), -np.inf, np.float32)
    for a in range(0, x.shape[0], 2048):
        block = np.maximum.reduceat(xs[a:a + 2048] @ xs.T, starts, axis=1)  # each row's best edge into each component
        present, first = np.unique(ls[a:a + 2048], return_index=True)
        best[present] = np.maximum(best[present], np.maximum.reduceat(block, first, axis=0))
    g, h = np.triu_indices(c, 1)
    taken, _ = forest.max_spanning_forest(g.astype(np.int64), h.astype(np.int64), best[g, h], c)
    return float(best[g, h][taken].sum(dtype=np.float64))


@pytest.mark.parametrize("n, topics", FUZZY)
def test_join_fuzzy(results, n, topics):
    x = synthetic_embeddings(n, topics=topics, seed=n)
    labels, edges, t_knn, t_forest = _forest(x)
    c = int(np.unique(labels).size)
    timed = {}
    for name, settings in (("join", join.DEFAULT_SETTINGS), ("exhaustive", EXHAUSTIVE)):
        t0 = time.perf_counter()
        joined = join.join_components(x, labels, per_row=JOIN_PER_ROW, settings=settings)
        timed[name] = (time.perf_counter() - t0, _tree_weight(edges, joined, n), float(joined[2][:c - 1].sum()))
    _, counts = np.unique(labels, return_counts=True)
    results[f"join_fuzzy_{n}_{topics}"] = {
        "n": n, "topics": topics, "components": c, "outside": int(n - counts.max()), "knn": t_knn,
        "forest": t_forest, **timed, "best_joining": _best_joining_weight(x, labels) if n <= BEST_MAX_N else None}


@summary
def _report(results):
    lines = []
    for n, topics in FUZZY:
        f = results.get(f"join_fuzzy_{n}_{topics}")
        if not f:
            continue
        (t, w, j), (t_ex, w_ex, j_ex) = f["join"], f["exhaustive"]
        best = f["best_joining"]
        lines.append(f"fuzzy join at n = {f['n']:,}, {f['topics']:,} topics ({f['components']} components, "
                     f"{f['outside']:,} rows outside the largest): {t:.2f} s, "
                     f"{100 * t / (f['knn'] + f['forest'] + t):.1f}% of the tree time (top-K {f['knn']:.1f} s); "
                     f"exhaustive {t_ex:.2f} s ({t_ex / t:.1f}x), {100 * t_ex / (f['knn'] + f['forest'] + t_ex):.1f}%; "
                     f"tree weight {w:.3f} vs {w_ex:.3f} ({100 * (w / w_ex - 1):+.4f}%); joining weight {j:.3f} "
                     f"(exhaustive {j_ex:.3f}" + (f", best joining tree {best:.3f}: {100 * j / best:.2f}%)" if best else ")"))
    r = results.get("join")
    if not r:
        return lines
    tree = r["knn"] + r["forest"] + r["join"]
    return lines + [f"join at n = {r['n']:,} ({r['components']} components): {r['join']:.2f} s, "
            f"{100 * r['join'] / tree:.1f}% of the tree time (top-K {r['knn']:.1f} s, forest {r['forest']:.1f} s); "
            f"exhaustive reference {r['exhaustive']:.2f} s ({r['exhaustive'] / r['join']:.1f}x); joining weight "
            f"{r['weight']:.4f} vs {r['exhaustive_weight']:.4f}; tree weight {r['tree']:.3f} vs "
            f"{r['exhaustive_tree']:.3f} ({100 * (r['tree'] / r['exhaustive_tree'] - 1):+.5f}%)"]
