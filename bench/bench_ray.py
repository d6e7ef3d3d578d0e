"""The Ray path on a local cluster (this machine's cores) against the single-process path, in one run.

    python -m pytest bench/bench_ray.py                                   # order at n = 200,000
    CHUNKTREE_BENCH_RAY_N=500000 python -m pytest bench/bench_ray.py      # any n

1. order() from embeddings (synthetic, 100 topics), method sparse: in this process against
   ``ray="local"`` (top-K blocks as tasks); the same order is checked, the overhead reported.
2. Embedding 1,024 chunks of the sample corpus: one process (onnxruntime on every core) against Ray
   Data with 1 and with 2 actors (one thread each): what more worker processes give on one machine.

On one machine the Ray path can only add overhead to work that already uses every core; what it
shows is the cost of the distribution, not the speed-up of a real cluster, where each node adds
its cores and the driver's share (K-means, forest, joining, walk) stays.
"""

import os
import time

import numpy as np
import pytest
from conftest import summary

ray = pytest.importorskip("ray")

from chunktree.engine import distributed  # noqa: E402
from chunktree.engine.datasets import synthetic_embeddings  # noqa: E402
from chunktree.engine.order import order  # noqa: E402

N = int(os.environ.get("CHUNKTREE_BENCH_RAY_N", "200000"))


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING")
    yield "local"
    ray.shutdown()


def test_order_overhead(results, cluster):
    x = synthetic_embeddings(N, seed=N)
    order(x[:5000], method="sparse")  # compiled kernels loaded
    t = time.perf_counter()
    plain = order(x, method="sparse")
    plain_s = time.perf_counter() - t
    t = time.perf_counter()
    on_ray = order(x, method="sparse", ray=cluster)
    ray_s = time.perf_counter() - t
    assert np.array_equal(plain.order, on_ray.order)
    results["ray"]["order"] = {"n": N, "plain_s": plain_s, "ray_s": ray_s, "plain_topk_s": plain.timings["topk_s"],
                               "ray_topk_s": on_ray.timings["topk_s"]}


def test_embedding_scaling(results, cluster, embedder):
    from chunktree.engine.chunking import chunk_documents
    from chunktree.engine.documents import sample_documents

    texts = [c.text for c in chunk_documents(sample_documents(), embedder.tokenizer)][:1024]
    batches = [texts[i:i + 64] for i in range(0, len(texts), 64)]
    embedder.embed(texts[:64])
    t = time.perf_counter()
    want = np.concatenate([embedder.embed(b) for b in batches])
    row = {"texts": len(texts), "plain_s": time.perf_counter() - t}
    for actors in (1, 2):
        t = time.perf_counter()
        got = dict(distributed.embed_batches(batches, embedder, cluster, actors=actors))
        row[f"ray_{actors}_s"] = time.perf_counter() - t
        np.testing.assert_allclose(np.concatenate([got[i] for i in range(len(batches))]), want, atol=1e-5)
    results["ray"]["embed"] = row


@pytest.fixture(scope="module")
def embedder():
    from chunktree import Embedder

    return Embedder()


@summary
def ray_summary(results):
    r = results.get("ray", {})
    lines = []
    o = r.get("order")
    if o:
        lines.append(f"order n={o['n']:,} sparse: one process {o['plain_s']:.1f} s (top-K {o['plain_topk_s']:.1f} s), "
                     f"Ray local {o['ray_s']:.1f} s (top-K {o['ray_topk_s']:.1f} s): {o['ray_s'] / o['plain_s']:.2f}x, "
                     "same order")
    e = r.get("embed")
    if e:
        lines.append(f"embed {e['texts']} sample chunks: one process {e['texts'] / e['plain_s']:.0f} chunks/s, Ray 1 actor "
                     f"{e['texts'] / e['ray_1_s']:.0f}/s, 2 actors {e['texts'] / e['ray_2_s']:.0f}/s")
    return lines
