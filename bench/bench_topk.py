"""The top-K neighbour search of the sparse method against FAISS and pynndescent, in one run.

    python -m pytest bench/bench_topk.py                                     # n = 100,000
    CHUNKTREE_BENCH_TOPK_N=200000 python -m pytest bench/bench_topk.py       # any n
    CHUNKTREE_BENCH_TOPK_TOPICS=5000 python -m pytest bench/bench_topk.py    # fuzzy: 5,000 fine topics

On the synthetic data (``chunktree.apps.scale.synthetic_embeddings``, 100 topics unless set),
top-16 of every row, recall@16 on 1,000 sampled rows against exact neighbours:
1. centres: chunktree's ``spherical_kmeans`` against ``faiss.Kmeans`` (spherical, 10 iterations, 64
   points per centre, the same 2·sqrt(n) centres), and the recall of the search after each;
2. search: chunktree's ``topk_clustered`` against faiss ``IndexIVFFlat`` with the same centres and
   nprobe (16), ``IndexHNSWFlat`` (M = 32; built once, searched at several efSearch values), and
   pynndescent (defaults):
   time and recall, to compare at matched recall. HNSW and pynndescent times include their build;
3. what the sparse method itself does (``order.sparse_neighbours``: centres, search, and the
   refinement passes while the estimated recall is below 0.99): time and recall.
"""

import os
import time

import numpy as np
import pytest
from conftest import summary

from chunktree.engine.datasets import synthetic_embeddings
from chunktree.engine.order import sparse_neighbours
from chunktree.kernels.kmeans import spherical_kmeans
from chunktree.kernels.topk import exact_sims_of_rows, recall_of_rows, topk_clustered

N = int(os.environ.get("CHUNKTREE_BENCH_TOPK_N", "100000"))
TOPICS = int(os.environ.get("CHUNKTREE_BENCH_TOPK_TOPICS", "100"))
K, PROBES = 16, 16
EF_SEARCH = (16, 32, 64)


@pytest.fixture(scope="module")
def data():
    x = synthetic_embeddings(N, topics=TOPICS, seed=N)
    rows = np.sort(np.random.default_rng(0).choice(N, 1000, replace=False))
    return x, rows, exact_sims_of_rows(x, rows, K)


recall = recall_of_rows


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def test_centres_and_search(results, data):
    faiss = pytest.importorskip("faiss")
    x, rows, exact = data
    c = round(2 * np.sqrt(N))
    ours, ours_s = timed(spherical_kmeans, x, c, 0)
    km = faiss.Kmeans(x.shape[1], c, niter=10, seed=0, spherical=True, max_points_per_centroid=64,
                      min_points_per_centroid=1)
    _, faiss_s = timed(km.train, x)
    row = {"n": N, "centres": c, "ours_kmeans_s": ours_s, "faiss_kmeans_s": faiss_s}
    for name, centres in (("ours", ours), ("faiss", km.centroids)):
        (_, sims), search_s = timed(topk_clustered, x, K, centres, PROBES)
        row[f"{name}_centres_recall"] = recall(sims[rows], exact)
        if name == "ours":
            row["ours_search_s"] = search_s
    # faiss IVFFlat with chunktree's centres and the same nprobe; k + 1 because it returns the row itself.
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(x.shape[1]), x.shape[1], c, faiss.METRIC_INNER_PRODUCT)
    ivf.quantizer.add(ours)
    ivf.is_trained = True
    ivf.nprobe = PROBES
    t = time.perf_counter()
    ivf.add(x)
    d, _ = ivf.search(x, K + 1)
    row["ivf_s"] = time.perf_counter() - t
    row["ivf_recall"] = recall(d[rows, 1:], exact)  # the first hit is the row itself (similarity 1)
    results["topk"]["centres_search"] = row


def test_hnsw(results, data):
    faiss = pytest.importorskip("faiss")
    x, rows, exact = data
    index = faiss.IndexHNSWFlat(x.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    _, build_s = timed(index.add, x)
    for ef in EF_SEARCH:
        index.hnsw.efSearch = ef
        (d, _), search_s = timed(index.search, x, K + 1)
        results["topk"][f"hnsw_{ef}"] = {"build_s": build_s, "search_s": search_s, "recall": recall(d[rows, 1:], exact)}


def test_sparse_neighbours(results, data):
    x, rows, exact = data
    timings, info = {}, {}
    (_, sims), s = timed(sparse_neighbours, x, K, round(2 * np.sqrt(N)), PROBES, 0, timings, None, info)
    results["topk"]["sparse_neighbours"] = {"s": s, "recall": recall(sims[rows], exact), **timings, **info}


def test_pynndescent(results, data):
    pynndescent = pytest.importorskip("pynndescent")
    x, rows, exact = data
    t = time.perf_counter()
    index = pynndescent.NNDescent(x, metric="dot", n_neighbors=K + 1, random_state=0, n_jobs=-1)
    _, dist = index.neighbor_graph
    s = time.perf_counter() - t
    results["topk"]["pynndescent"] = {"s": s, "recall": recall(1.0 - dist[rows, 1:], exact)}


@summary
def topk_summary(results):
    r = results.get("topk", {})
    lines = []
    row = r.get("centres_search")
    if row:
        lines.append(f"n={row['n']:,}, {TOPICS} topics, {row['centres']} centres: spherical_kmeans {row['ours_kmeans_s']:.2f} s vs "
                     f"faiss.Kmeans {row['faiss_kmeans_s']:.2f} s ({row['faiss_kmeans_s'] / row['ours_kmeans_s']:.1f}x); "
                     f"search recall@16 after them {row['ours_centres_recall']:.3f} vs {row['faiss_centres_recall']:.3f}")
        lines.append(f"search: chunktree topk_clustered {row['ours_search_s']:.2f} s (recall {row['ours_centres_recall']:.3f})"
                     f" vs faiss IndexIVFFlat same centres and nprobe {row['ivf_s']:.2f} s (recall {row['ivf_recall']:.3f}),"
                     f" {row['ivf_s'] / row['ours_search_s']:.1f}x")
    for ef in EF_SEARCH:
        h = r.get(f"hnsw_{ef}")
        if h:
            lines.append(f"faiss IndexHNSWFlat M=32 efSearch={ef}: build {h['build_s']:.2f} s + search {h['search_s']:.2f} s"
                         f" = {h['build_s'] + h['search_s']:.2f} s, recall {h['recall']:.3f}")
    sn = r.get("sparse_neighbours")
    if sn:
        lines.append(f"chunktree sparse_neighbours (centres {sn['kmeans_s']:.2f} s, search {sn['topk_s']:.2f} s, "
                     f"recall estimate and {sn['refine_passes']} refinement passes {sn['refine_s']:.2f} s): {sn['s']:.2f} s, "
                     f"recall {sn['recall']:.3f}")
    p = r.get("pynndescent")
    if p:
        lines.append(f"pynndescent: {p['s']:.2f} s, recall {p['recall']:.3f}")
    return lines
