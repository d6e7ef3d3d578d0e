"""Joining the top-K forest's components: time and joining weight of ``join_components`` against
its exhaustive reference (every pair of components searched in full), in the same run, with the
top-K search and the forest timed beside it for the share; and on fuzzy data (n / 3 rows, a topic
per 20), where the rows outside the largest component are searched against all of it, the int8
search against the same search in float32.

    python -m pytest bench/bench_join.py                                  # n = 300,000 and 100,000
    CHUNKTREE_BENCH_JOIN_N=1000000 python -m pytest bench/bench_join.py  # about 8 minutes

Goal (issue 13, reported, not asserted): joining <= 10% of the tree time, at the exhaustive
join's weight.
"""

import os
import time

import numpy as np
from conftest import summary

from chunktree.engine.order import DEFAULT_K, DEFAULT_PROBES, JOIN_PER_ROW, sparse_neighbours
from chunktree.engine.scale import synthetic_embeddings
from chunktree.kernels import forest

N = int(os.environ.get("CHUNKTREE_BENCH_JOIN_N", 300_000))


def _forest(x):
    """The component labels of the top-K forest of ``x``, and the seconds of the top-K search and
    of the forest."""
    n = x.shape[0]
    t0 = time.perf_counter()
    ids, sims = sparse_neighbours(x, DEFAULT_K, round(2 * np.sqrt(n)), DEFAULT_PROBES, 0)
    t_knn = time.perf_counter() - t0
    valid = ids.ravel() >= 0
    src = np.repeat(np.arange(n, dtype=np.int64), DEFAULT_K)[valid]
    t0 = time.perf_counter()
    _, labels = forest.max_spanning_forest(src, ids.ravel()[valid], sims.ravel()[valid], n)
    return labels, t_knn, time.perf_counter() - t0


def test_join(results, monkeypatch):
    x = synthetic_embeddings(N, seed=0)
    labels, t_knn, t_forest = _forest(x)
    t0 = time.perf_counter()
    joined = forest.join_components(x, labels)
    t_join = time.perf_counter() - t0
    monkeypatch.setattr(forest, "EXACT_PAIRS", 1 << 62)
    t0 = time.perf_counter()
    exhaustive = forest.join_components(x, labels)
    t_exhaustive = time.perf_counter() - t0
    results["join"] = {"n": N, "components": int(np.unique(labels).size), "knn": t_knn, "forest": t_forest,
                       "join": t_join, "exhaustive": t_exhaustive, "weight": float(joined[2].sum()),
                       "exhaustive_weight": float(exhaustive[2].sum())}


def test_join_fuzzy(results, monkeypatch):
    n = N // 3
    x = synthetic_embeddings(n, topics=n // 20, seed=n)
    labels, t_knn, t_forest = _forest(x)
    timed = {}
    for name, threshold in (("int8", None), ("float32", 1 << 62)):
        if threshold:
            for limit in ("INT8_ROWS", "INT8_COLUMNS", "INT8_PAIRS"):
                monkeypatch.setattr(forest, limit, threshold)
        t0 = time.perf_counter()
        joined = forest.join_components(x, labels, per_row=JOIN_PER_ROW)
        timed[name] = (time.perf_counter() - t0, float(joined[2].sum(dtype=np.float64)), joined[2].size)
    _, counts = np.unique(labels, return_counts=True)
    results["join_fuzzy"] = {"n": n, "components": counts.size, "outside": int(n - counts.max()), "knn": t_knn,
                             "forest": t_forest, **timed}


@summary
def _report(results):
    lines = []
    f = results.get("join_fuzzy")
    if f:
        (t8, w8, e8), (t32, w32, e32) = f["int8"], f["float32"]
        lines.append(f"fuzzy join at n = {f['n']:,} ({f['components']} components, {f['outside']:,} rows outside "
                     f"the largest): int8 {t8:.2f} s, {100 * t8 / (f['knn'] + f['forest'] + t8):.1f}% of the tree "
                     f"time (top-K {f['knn']:.1f} s); float32 {t32:.2f} s ({t32 / t8:.2f}x); weight of the "
                     f"{e8:,} joining and spare edges {w8:.4f} vs {w32:.4f} ({e32:,} edges)")
    r = results.get("join")
    if not r:
        return lines
    tree = r["knn"] + r["forest"] + r["join"]
    return lines + [f"join at n = {r['n']:,} ({r['components']} components): {r['join']:.2f} s, "
            f"{100 * r['join'] / tree:.1f}% of the tree time (top-K {r['knn']:.1f} s, forest {r['forest']:.1f} s); "
            f"exhaustive reference {r['exhaustive']:.2f} s ({r['exhaustive'] / r['join']:.1f}x); joining weight "
            f"{r['weight']:.4f} vs {r['exhaustive_weight']:.4f}"]
