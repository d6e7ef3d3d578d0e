"""The sparse method's matrix products on the CPU's bf16 units against float32 BLAS, in one run.

    python -m pytest bench/bench_products.py                                     # n = 1,000,000
    CHUNKTREE_BENCH_PRODUCTS_N=200000 python -m pytest bench/bench_products.py   # any n

On the synthetic data (``chunktree.apps.scale.synthetic_embeddings``, kept as float16 as
``order`` keeps it) with 2·sqrt(n) centres, the three stages of ``order``'s sparse method that
are matrix products, each once with float32 products (numpy's BLAS) and once with bf16 products
(``chunktree.kernels.bf16``): the centres (``spherical_kmeans``), the probe lists of every row
(16 probes, ``PROBE_GAP``) and the search of every row (``search_rows``, in the blocks
``topk_clustered`` uses). Both searches start from the same centres, so their lists compare: the
share of rows whose probe lists and neighbour lists are the same, and the largest difference
between their similarities. Skipped where the CPU has no bf16 units.
"""

import os
import time

import numpy as np
import pytest
from conftest import summary

from chunktree.engine.datasets import synthetic_embeddings
from chunktree.engine.order import DEFAULT_K, DEFAULT_PROBES, PROBE_GAP
from chunktree.kernels import bf16
from chunktree.kernels.kmeans import spherical_kmeans
from chunktree.kernels.topk import ClusterIndex, probe_lists, row_block_size, search_rows

N = int(os.environ.get("CHUNKTREE_BENCH_PRODUCTS_N", "1000000"))
CLUSTERS = round(2 * np.sqrt(N))

pytestmark = pytest.mark.skipif(not bf16.available(), reason="this CPU has no bf16 units OpenVINO lists")


@pytest.fixture(scope="module")
def data():
    return synthetic_embeddings(N, seed=N).astype(np.float16)


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def search(x, centers, on_bf16):
    """The probe lists and the lists of every row, and the seconds of each."""
    probed, probe_s = timed(probe_lists, x, centers, DEFAULT_PROBES, PROBE_GAP, bf16=on_bf16)
    clusters = ClusterIndex.build(probed[:, 0], CLUSTERS)
    t = time.perf_counter()
    block = row_block_size(N)
    found = [search_rows(x, np.arange(s, min(s + block, N)), probed[s:s + block], clusters, DEFAULT_K, bf16=on_bf16)
             for s in range(0, N, block)]
    ids, sims = (np.concatenate(parts) for parts in zip(*found))
    return probed, ids, sims, probe_s, time.perf_counter() - t


def test_products(results, data):
    x = data
    centers, float32_kmeans_s = timed(spherical_kmeans, x, CLUSTERS, 0)
    _, bf16_kmeans_s = timed(spherical_kmeans, x, CLUSTERS, 0, bf16=True)
    probed, ids, sims, float32_probe_s, float32_search_s = search(x, centers, False)
    probed_b, ids_b, sims_b, bf16_probe_s, bf16_search_s = search(x, centers, True)
    results["products"] = {
        "n": N, "dims": x.shape[1], "clusters": CLUSTERS, "k": DEFAULT_K, "probes": DEFAULT_PROBES,
        "float32_kmeans_s": float32_kmeans_s, "bf16_kmeans_s": bf16_kmeans_s,
        "float32_probe_s": float32_probe_s, "bf16_probe_s": bf16_probe_s,
        "float32_search_s": float32_search_s, "bf16_search_s": bf16_search_s,
        "same_probe_lists": float(np.mean((probed == probed_b).all(axis=1))),
        "same_lists": float(np.mean((ids == ids_b).all(axis=1))),
        "max_similarity_difference": float(np.where(sims == sims_b, 0, np.abs(sims - sims_b)).max()),
    }


@summary
def products_summary(results):
    r = results.get("products")
    if not r:
        return []
    lines = [f"n={r['n']:,} x {r['dims']} float16, {r['clusters']:,} centres, top-{r['k']} over {r['probes']} probes:"]
    for stage, name in (("kmeans", "centres (spherical_kmeans)"), ("probe", "probe lists"), ("search", "search")):
        f, b = r[f"float32_{stage}_s"], r[f"bf16_{stage}_s"]
        lines.append(f"{name}: float32 products {f:.1f} s, bf16 products {b:.1f} s ({f / b:.2f}x)")
    lines.append(f"same probe lists in {r['same_probe_lists']:.4%} of rows, same neighbour lists in {r['same_lists']:.4%}; "
                 f"similarities differ by at most {r['max_similarity_difference']:.1e}")
    return lines
