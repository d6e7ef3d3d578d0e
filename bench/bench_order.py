"""Ordering speed, memory and tree quality, with the references measured in the same run.

    python -m pytest bench/bench_order.py                       # all but the largest sizes
    CHUNKTREE_BENCH_LARGE=1 python -m pytest bench/bench_order.py   # adds exact n = 50k (10 GB)

1. order() from embeddings vs the naive pipeline of the original blog (sklearn cosine_similarity +
   networkx complete Graph + maximum_spanning_tree + DFS), n = 500, 1,000, 2,000. Goal >= 300x at 2,000.
2. Exact path at n = 5k, 10k, 20k vs one float32 X @ X.T. Goal <= 1.5x its time; peak memory at
   20k <= 2.5 GB (tracemalloc: numpy reports its buffers to it).
3. Sparse path at n = 20k, 50k (weight vs exact) and 100k. Goal <= 60 s and <= 2 GB at 100k, tree
   weight >= 99% of exact where exact is computable.
4. End to end: `chunktree order --sample`, cold and warm embedding cache, split chunk/embed/order.
"""

import json
import os
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest
from conftest import summary

from chunktree.engine.datasets import synthetic_embeddings
from chunktree.engine.order import order, sparse_neighbours

LARGE = os.environ.get("CHUNKTREE_BENCH_LARGE") == "1"


def naive_blog_order(x):
    import networkx as nx
    from sklearn.metrics.pairwise import cosine_similarity

    sim = cosine_similarity(x)
    g = nx.Graph()
    n = len(x)
    g.add_weighted_edges_from((i, j, sim[i, j]) for i in range(n) for j in range(i + 1, n))
    tree = nx.maximum_spanning_tree(g)
    return list(nx.dfs_preorder_nodes(tree, source=int(np.argmax(sim.sum(axis=1)))))


def peak_mb(fn, *args, **kwargs):
    tracemalloc.start()
    tracemalloc.reset_peak()
    out = fn(*args, **kwargs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, peak / 2**20


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


@pytest.mark.parametrize("n", [500, 1000, 2000])
def test_vs_naive_pipeline(benchmark, results, n):
    pytest.importorskip("networkx")
    pytest.importorskip("sklearn")
    x = synthetic_embeddings(n, seed=n)
    ours = benchmark.pedantic(order, args=(x,), kwargs={"strategy": "dfs", "method": "exact"}, rounds=5,
                              iterations=1, warmup_rounds=1)
    naive, naive_s = timed(naive_blog_order, x)
    assert sorted(naive) == sorted(ours.order.tolist())
    ours_s = float(np.median(benchmark.stats.stats.data))
    results["order"][f"naive_{n}"] = {"ours_s": ours_s, "naive_s": naive_s}
    benchmark.extra_info.update(results["order"][f"naive_{n}"])


@pytest.mark.parametrize("n", [5000, 10000, 20000])
def test_exact_vs_one_gemm(benchmark, results, n):
    x = synthetic_embeddings(n, seed=n)
    rounds = 5
    # Each product allocates and first-touches its n x n output, as order() does: same cost model.
    gemm_s = float(np.median([timed(lambda: x @ x.T)[1] for _ in range(rounds)]))
    result = benchmark.pedantic(order, args=(x,), kwargs={"method": "exact"}, rounds=rounds, iterations=1)
    _, peak = peak_mb(order, x, method="exact")
    results["order"][f"exact_{n}"] = {"order_s": float(np.median(benchmark.stats.stats.data)),
                                      "gemm_s": gemm_s, "peak_mb": peak, "tree_s": result.timings["tree_s"]}
    benchmark.extra_info.update(results["order"][f"exact_{n}"])


# (n, topics): 100 broad topics, or fine topics of about 20 chunks each (fuzzier neighbourhoods).
SPARSE_CASES = [(20000, 100), (20000, 1000), (50000, 100), (50000, 2500), (100000, 100), (100000, 5000)]


@pytest.mark.parametrize("n, topics", SPARSE_CASES)
def test_sparse(benchmark, results, n, topics):
    if n == 50000 and not LARGE:
        pytest.skip("exact reference at n = 50k needs 10 GB; set CHUNKTREE_BENCH_LARGE=1")
    x = synthetic_embeddings(n, topics=topics, seed=n)
    result = benchmark.pedantic(order, args=(x,), kwargs={"method": "sparse"}, rounds=1, iterations=1)
    _, peak = peak_mb(order, x, method="sparse")
    row = {"order_s": float(np.median(benchmark.stats.stats.data)), "peak_mb": peak,
           "components": result.params["forest_components"], "tree_s": result.timings["tree_s"]}
    # Recall@k of the sparse neighbours on 2,000 rows, against exact neighbours of those rows.
    p = result.params
    ids, _ = sparse_neighbours(x, p["k"], p["n_clusters"], p["probes"], p["seed"])
    rows = np.random.default_rng(0).choice(n, 2000, replace=False)
    s = x[rows] @ x.T
    s[np.arange(2000), rows] = -np.inf
    exact = np.argpartition(-s, p["k"] - 1, axis=1)[:, :p["k"]]
    row["recall"] = float(np.mean([len(set(a) & set(b)) / p["k"] for a, b in zip(ids[rows].tolist(), exact.tolist())]))
    if n <= 20000 or (LARGE and n <= 50000):  # exact at 100k would need 37 GB
        row["weight_ratio"] = result.tree_weight / order(x, method="exact").tree_weight
    results["order"][f"sparse_{n}_{topics}"] = row
    benchmark.extra_info.update(row)


def test_end_to_end_sample(results, tmp_path):
    cache = tmp_path / "cache.sqlite"
    rows = {}
    for run in ("cold", "warm"):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "chunktree", "order", "--sample", "--query",
                              "Why does Ahab hunt the white whale?", "--format", "json", "--top", "1",
                              "--cache", str(cache)], capture_output=True, text=True, check=True)
        doc = json.loads(out.stdout)
        timings = doc["timings"]
        rows[run] = {**timings, "order_s": timings["total_s"] - timings["embed_s"],
                     "cache_hits": doc["embedding"]["cache_hits"], "n": doc["n_chunks"],
                     "wall_s": time.perf_counter() - t}
    results["order"]["e2e"] = rows


@summary
def order_summary(results):
    r = results.get("order", {})
    lines = []
    for n in (500, 1000, 2000):
        row = r.get(f"naive_{n}")
        if row:
            ratio = row["naive_s"] / row["ours_s"]
            goal = f" (goal >= 300x: {'met' if ratio >= 300 else 'NOT met'})" if n == 2000 else ""
            lines.append(f"order vs naive blog pipeline, n={n}: ours {row['ours_s'] * 1e3:.1f} ms, naive "
                         f"{row['naive_s']:.2f} s, {ratio:.0f}x faster{goal}")
    for n in (5000, 10000, 20000):
        row = r.get(f"exact_{n}")
        if row:
            ratio = row["order_s"] / row["gemm_s"]
            mem = ""
            if n == 20000:
                mem = f"; peak {row['peak_mb']:.0f} MB (goal <= 2560: {'met' if row['peak_mb'] <= 2560 else 'NOT met'})"
            lines.append(f"exact n={n}: order {row['order_s']:.2f} s (last tree {row['tree_s']:.2f} s), one X@X.T "
                         f"{row['gemm_s']:.2f} s, ratio {ratio:.2f} (goal <= 1.5: {'met' if ratio <= 1.5 else 'NOT met'}){mem}")
    for n, topics in SPARSE_CASES:
        row = r.get(f"sparse_{n}_{topics}")
        if row:
            line = (f"sparse n={n}, {topics} topics: {row['order_s']:.2f} s, peak {row['peak_mb']:.0f} MB, "
                    f"recall@16 {row['recall']:.3f}, {row['components']} forest components")
            if "weight_ratio" in row:
                line += f", tree weight {100 * row['weight_ratio']:.3f}% of exact"
            if n == 100000:
                ok = row["order_s"] <= 60 and row["peak_mb"] <= 2048
                line += f" (goal <= 60 s and <= 2 GB: {'met' if ok else 'NOT met'})"
            lines.append(line)
    e2e = r.get("e2e")
    if e2e:
        for run, row in e2e.items():
            lines.append(f"order --sample, {run} cache: {row['n']} chunks, chunk {row['chunk_s']:.2f} s, embed "
                         f"{row['embed_s']:.2f} s ({row['cache_hits']} from cache), order {row['order_s']:.3f} s, "
                         f"wall {row['wall_s']:.1f} s")
    return lines
