"""The SQLite embedding cache: round trips, model separation, two writing processes, cache hits."""

import hashlib
import multiprocessing as mp
import sqlite3

import numpy as np
import pytest

from chunktree import EmbeddingCache, embed_texts


def vector_of(text, dim=8):
    """A deterministic vector per text, independent of the cache."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32)


def test_round_trip_and_misses(tmp_path):
    texts = ["a", "b", "ünïcode", ""]
    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        cache.put("m1", texts[:3], np.stack([vector_of(t) for t in texts[:3]]))
        vectors, found = cache.get("m1", texts, 8)
        assert found.tolist() == [True, True, True, False]
        np.testing.assert_array_equal(vectors[:3], np.stack([vector_of(t) for t in texts[:3]]))
        assert not vectors[3].any()
        assert not cache.get("m2", texts, 8)[1].any()  # other model: nothing
        assert not cache.get("m1", texts, 16)[1].any()  # other dimension: nothing
        assert len(cache) == 3
    with EmbeddingCache(tmp_path / "c.sqlite") as again:  # persisted
        assert again.get("m1", ["b"], 8)[1].all()


def test_many_keys_in_one_lookup(tmp_path):
    texts = [f"text {i}" for i in range(1234)]
    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        cache.put("m", texts, np.stack([vector_of(t) for t in texts]))
        vectors, found = cache.get("m", texts[::-1], 8)
    assert found.all()
    np.testing.assert_array_equal(vectors[0], vector_of(texts[-1]))


def test_put_shape_error(tmp_path):
    with EmbeddingCache(tmp_path / "c.sqlite") as cache, pytest.raises(ValueError, match=r"shape \(2, dim\)"):
        cache.put("m", ["a", "b"], np.zeros((3, 8)))


def _writer(path, worker, rounds):
    cache = EmbeddingCache(path)
    for r in range(rounds):
        # Both workers write overlapping keys: the even ones are shared.
        texts = [f"t{i}" if i % 2 == 0 else f"w{worker}-t{i}" for i in range(r * 50, r * 50 + 50)]
        cache.put("m", texts, np.stack([vector_of(t) for t in texts]))
        cache.get("m", texts, 8)
    cache.close()


def test_two_processes_do_not_corrupt(tmp_path):
    path = tmp_path / "shared.sqlite"
    EmbeddingCache(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    expected = [f"t{i}" for i in range(0, 2000, 2)] + [f"w{w}-t{i}" for w in range(2) for i in range(1, 2000, 2)]
    with EmbeddingCache(path) as cache:
        assert len(cache) == len(expected) == 3000
        vectors, found = cache.get("m", expected, 8)
    assert found.all()
    np.testing.assert_array_equal(vectors, np.stack([vector_of(t) for t in expected]))


def test_second_run_embeds_nothing_new(tmp_path, embedder):
    texts = ["whales", "ships", "whales", "harpoons"]
    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        first, s1 = embed_texts(texts, embedder, cache)
        assert (s1.texts, s1.cache_hits, s1.embedded) == (4, 0, 3)  # the repeated text embedded once
        second, s2 = embed_texts(texts + ["sails"], embedder, cache)
        assert (s2.texts, s2.cache_hits, s2.embedded) == (5, 4, 1)
    np.testing.assert_array_equal(second[:4], first)
    np.testing.assert_allclose(first, embedder.embed(texts), atol=1e-6)
    uncached, s3 = embed_texts(texts, embedder)
    assert s3.cache_hits == 0
    np.testing.assert_allclose(uncached, first, atol=1e-6)
