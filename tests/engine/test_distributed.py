"""The Ray path on a real local cluster (two CPUs, shared by these tests): the same vectors and the
same order as the single-process path, and the CLI's --ray."""

import json
import subprocess
import sys

import numpy as np
import pytest
from strict_json import loads

ray = pytest.importorskip("ray")

from chunktree.engine import distributed  # noqa: E402
from chunktree.engine.cache import EmbeddingCache  # noqa: E402
from chunktree.engine.embedding import embed_texts  # noqa: E402
from chunktree.engine.order import order  # noqa: E402
from chunktree.kernels.kmeans import spherical_kmeans  # noqa: E402
from chunktree.kernels.topk import topk_clustered, topk_exact  # noqa: E402


def test_a_bad_address_is_one_clear_error():
    if ray.is_initialized():
        pytest.skip("a cluster is already joined in this process")
    with pytest.raises(ValueError, match=r"ray address '127.0.0.1:1': no Ray cluster answers there"):
        distributed.connect("127.0.0.1:1")
    with pytest.raises(ValueError, match="expected 'local', 'auto' or HOST:PORT"):
        distributed.connect("nowhere")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield "local"
    ray.shutdown()


def clustered(n, d=48, topics=30, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((topics, d))[rng.integers(0, topics, n)] + 0.7 * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_topk_on_ray_equals_the_single_process_search(cluster):
    x = clustered(5000)
    centers = spherical_kmeans(x, 60, seed=0)
    # Small row blocks: several tasks, the last one short.
    want = topk_clustered(x, 10, centers, 8, row_block=1300)
    got = distributed.topk_clustered(x, 10, centers, 8, cluster, row_block=1300)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    # And the search is a real one: all clusters probed gives the exact lists.
    exact_sims = topk_exact(x, 10)[1]
    np.testing.assert_allclose(distributed.topk_clustered(x, 10, centers, 60, cluster, row_block=1300)[1],
                               exact_sims, atol=1e-5)


def test_order_on_ray_equals_order_in_one_process(cluster):
    x = clustered(3000, seed=1)
    want = order(x, method="sparse", strategy="bfs", seed=3)
    got = order(x, method="sparse", strategy="bfs", seed=3, ray=cluster)
    np.testing.assert_array_equal(got.order, want.order)
    np.testing.assert_array_equal(got.parent, want.parent)
    assert got.tree_weight == want.tree_weight and got.params == want.params


def test_a_memory_mapped_float16_file_is_mapped_by_the_tasks_and_gives_the_same_order(cluster, tmp_path):
    """Above EXACT_MAX_N rows (the probe gap applies); the tasks map the file instead of getting
    a copy of it through the object store."""
    from chunktree.engine.datasets import synthetic_embeddings
    from chunktree.engine.inputs import prepare

    np.save(tmp_path / "x.npy", synthetic_embeddings(24_000, topics=40, seed=5).astype(np.float16))
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    vectors = prepare(mapped, keep_float16=True).vectors
    assert distributed._mapped_file(vectors) == (str(tmp_path / "x.npy"), mapped.offset, "<f2", (24_000, 384))
    assert distributed._mapped_file(vectors[1:]) is None and distributed._mapped_file(np.ones((3, 2))) is None
    want = order(mapped, method="sparse", seed=3)
    got = order(mapped, method="sparse", seed=3, ray=cluster)
    np.testing.assert_array_equal(got.order, want.order)
    assert got.tree_weight == want.tree_weight and got.params == want.params


def test_embedding_on_ray_gives_the_same_vectors_and_fills_the_cache(cluster, embedder, tmp_path):
    words = "whale ship sea harpoon captain sail rope storm island ocean wind deck crew".split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, rng.integers(3, 40))) for _ in range(120)]
    texts += texts[:20]  # repeats are embedded once
    want, _ = embed_texts(texts, embedder, commit_every=32)
    cache = EmbeddingCache(tmp_path / "cache.sqlite")
    got, stats = embed_texts(texts, embedder, cache, commit_every=32, ray=cluster)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (stats.embedded, stats.cache_hits) == (len(set(texts)), 0)
    again, stats = embed_texts(texts, embedder, cache, ray=cluster)
    assert (stats.embedded, stats.cache_hits) == (0, len(texts))
    np.testing.assert_array_equal(again, got)


def test_cli_order_on_a_running_cluster(cluster, tmp_path, capsys):
    from chunktree.apps.cli.main import main

    x = clustered(800, d=384, seed=2)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "x.jsonl").write_text("".join(json.dumps({"id": i, "text": f"chunk {i}", "source": "s", "index": i,
                                                          "start": 0, "end": 1}) + "\n" for i in range(800)))
    args = ["order", "--embeddings", str(tmp_path / "x.npy"), "--method", "sparse", "--format", "json", "--top", "1",
            "--no-cache"]  # vectors given: nothing to embed, and no share of the session's cache file
    assert main(args) == 0  # the plain run in this process; the one on Ray in a process of its own
    plain = loads(capsys.readouterr().out)
    # The documented steps for a real cluster: join a running one by its address.
    address = ray.get_runtime_context().gcs_address
    on_ray = subprocess.run([sys.executable, "-m", "chunktree", *args, "--ray", address], capture_output=True, text=True)
    assert on_ray.returncode == 0, on_ray.stderr
    assert loads(on_ray.stdout)["order"] == plain["order"]


def test_ray_without_its_extra_fails_before_any_work(monkeypatch, embedder):
    """Even when nothing would reach the cluster (exact method, vectors given), --ray is not ignored."""
    monkeypatch.setitem(sys.modules, "ray", None)  # what an install without the extra looks like
    with pytest.raises(ImportError, match=r"pip install 'chunktree\[ray\]'"):
        order(clustered(50), method="exact", ray="local")
    with pytest.raises(ImportError, match=r"pip install 'chunktree\[ray\]'"):
        embed_texts(["a text"], embedder, ray="local")
