"""The SQLite embedding cache: round trips, model separation, two writing processes, cache hits."""

import hashlib
import logging
import multiprocessing as mp
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from chunktree import EmbeddingCache, embed_texts
from chunktree.checks import InvalidValueError
from chunktree.engine.cache import text_key


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


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_file_is_moved_aside_and_replaced(tmp_path, caplog, damage):
    path = tmp_path / "c.sqlite"
    texts = [f"text {i}" for i in range(2000)]
    with EmbeddingCache(path) as cache:
        cache.put("m", texts, np.stack([vector_of(t) for t in texts]))
    data = path.read_bytes()
    path.write_bytes(b"this is not sqlite " * 200 if damage == "garbage" else data[: len(data) // 3])
    with EmbeddingCache(path) as cache:  # no traceback: the run goes on with a new cache
        _vectors, found = cache.get("m", texts, 8)
        assert not found.all()
        cache.put("m", ["new"], vector_of("new")[None])
        assert cache.get("m", ["new"], 8)[1].all()
    aside = list(tmp_path.glob("c.sqlite.corrupt-*"))
    assert len(aside) == 1 and aside[0].stat().st_size > 0
    assert "cannot be read" in caplog.text and str(aside[0]) in caplog.text


def test_a_locked_cache_is_not_mistaken_for_damage(tmp_path, caplog):
    path = tmp_path / "c.sqlite"
    EmbeddingCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock past the timeout
    try:
        with EmbeddingCache(path, timeout=0.1) as cache:
            cache.put("m", ["a"], vector_of("a")[None])  # not stored: the run goes on
            assert not cache.writable
        assert "cannot be written (database is locked); going on without storing" in caplog.text
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_corrupted_vector_bytes_are_caught_and_re_embedded(tmp_path, caplog, embedder):
    path = tmp_path / "c.sqlite"
    texts = ["whales", "ships", "harpoons"]
    with EmbeddingCache(path) as cache:
        want, _ = embed_texts(texts, embedder, cache)
    db = sqlite3.connect(path)
    key = hashlib.sha256(b"ships").digest()
    (blob,) = db.execute("SELECT vector FROM embeddings WHERE text_sha256 = ?", (key,)).fetchone()
    flipped = (-np.frombuffer(blob, np.float32)).tobytes()  # still finite, still unit norm
    db.execute("UPDATE embeddings SET vector = ? WHERE text_sha256 = ?", (flipped, key))
    db.commit()
    db.close()
    with EmbeddingCache(path) as cache:
        got, stats = embed_texts(texts, embedder, cache)
        assert (stats.cache_hits, stats.embedded) == (2, 1)
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert embed_texts(texts, embedder, cache)[1].cache_hits == 3  # the bad row was overwritten
    assert "1 stored vector(s) failed their check" in caplog.text


def test_rows_of_a_cache_without_checksums_are_checked_for_finite_unit_vectors(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)  # the schema before checksums
    db.execute("CREATE TABLE embeddings (model TEXT NOT NULL, text_sha256 BLOB NOT NULL, dim INTEGER NOT NULL, "
               "vector BLOB NOT NULL, PRIMARY KEY (model, text_sha256)) WITHOUT ROWID")
    unit = np.eye(4, dtype=np.float32)[0]
    for text, v in [("good", unit), ("nan", np.full(4, np.nan, np.float32)), ("long", 2 * unit)]:
        db.execute("INSERT INTO embeddings VALUES ('m', ?, 4, ?)", (hashlib.sha256(text.encode()).digest(), v.tobytes()))
    db.commit()
    db.close()
    with EmbeddingCache(path) as cache:
        _, found = cache.get("m", ["good", "nan", "long"], 4)
    assert found.tolist() == [True, False, False]


_KILLED_RUN = """
import sys
from chunktree import Embedder, EmbeddingCache, embed_texts
texts = [f"sentence number {i} about whales and ships" for i in range(int(sys.argv[2]))]
embed_texts(texts, Embedder(batch_size=8), EmbeddingCache(sys.argv[1]), commit_every=16)
"""


def test_a_killed_run_keeps_what_it_committed_and_resumes(tmp_path, embedder):
    import os
    import signal
    import subprocess
    import sys
    import time

    path, n = tmp_path / "c.sqlite", 4000
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(path), str(n)])
    try:
        deadline = time.monotonic() + 120
        committed = 0
        while committed < 32 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            if path.exists():
                try:
                    with sqlite3.connect(path, timeout=1) as db:
                        committed = db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
                except sqlite3.OperationalError:
                    pass
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL  # killed mid-run, not finished
    texts = [f"sentence number {i} about whales and ships" for i in range(n)]
    with EmbeddingCache(path) as cache:
        kept = len(cache)
        assert 32 <= kept < n and kept % 16 == 0  # whole committed slices, nothing half-written
        _, found = cache.get(embedder.vectors_id, texts, embedder.dim)
        assert found.sum() == kept


class _FailingEmbedder:
    """Vectors from ``vector_of``; the call after ``good`` calls fails, like a run stopped midway."""

    model_id = vectors_id = "fake"
    backend, precision, dim = "fake", "fp32", 8
    choice = type("Choice", (), {"reason": "a fake embedder"})

    def __init__(self, good=None):
        self.good, self.calls = good, 0

    def embed(self, texts):
        self.calls += 1
        if self.good is not None and self.calls > self.good:
            raise KeyboardInterrupt
        return np.stack([vector_of(t) for t in texts])


def test_vectors_go_into_the_output_file_as_they_come_and_a_stopped_run_resumes(tmp_path):
    texts = [f"text {i:03d} " + "x" * (i % 7) for i in range(100)]
    want = np.stack([vector_of(t) for t in texts])
    partial = tmp_path / "v.npy.partial"
    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(100, 8))
        with pytest.raises(KeyboardInterrupt):
            embed_texts(texts, _FailingEmbedder(good=3), cache, commit_every=10, out=out)
        del out
        on_disk = np.load(partial, mmap_mode="r")  # what the stopped run had written to the file
        _, found = cache.get("fake", texts, 8)
        assert found.sum() == 30  # three committed slices
        np.testing.assert_array_equal(on_disk[found], want[found])
        assert not on_disk[~found].any()

        out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(100, 8))
        vectors, stats = embed_texts(texts, _FailingEmbedder(), cache, commit_every=10, out=out)
        assert vectors is out and (stats.cache_hits, stats.embedded) == (30, 70)
        out.flush()
        np.testing.assert_array_equal(np.load(partial), want)


def _read_only():
    a = np.zeros((4, 8), np.float32)
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("make", [lambda: np.zeros((5, 8), np.float32), lambda: np.zeros((4, 8)), _read_only,
                                  lambda: [[0.0] * 8] * 4], ids=["shape", "dtype", "read-only", "list"])
def test_a_wrong_output_array_is_refused_before_embedding(make):
    embedder = _FailingEmbedder(good=0)  # any call to embed would fail with KeyboardInterrupt
    with pytest.raises(ValueError, match=r"out must be a writable float32 array of shape \(4, 8\)"):
        embed_texts(["a", "b", "c", "d"], embedder, None, out=make())


def test_a_file_of_yours_given_as_the_cache_is_refused_and_left_alone(tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\nnever to be moved\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"notes\.md is not an SQLite file \(it starts with b'# my notes"):
        EmbeddingCache(notes)
    assert notes.read_text(encoding="utf-8") == "# my notes\nnever to be moved\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.md"]  # nothing moved aside, nothing made


@pytest.mark.parametrize("make, message", [
    (lambda p: p.mkdir(), "is a folder; give the path of a file"),
    (lambda p: p.parent.mkdir() or None, None),  # fine: a new file in a new folder
])
def test_a_cache_path_that_is_a_folder_is_refused(tmp_path, make, message):
    path = tmp_path / "sub" / "c.sqlite" if message is None else tmp_path / "c.sqlite"
    make(path)
    if message is None:
        EmbeddingCache(path).close()
        assert path.is_file()
    else:
        with pytest.raises(ValueError, match=message):
            EmbeddingCache(path)


def test_a_cache_under_a_file_is_refused_naming_it(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match=r"afile/c\.sqlite: cannot create its folder"):
        EmbeddingCache(tmp_path / "afile" / "c.sqlite")


FULL_DISK = r'''
import logging, resource, signal, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
import numpy as np
from chunktree.engine.cache import EmbeddingCache
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))
cache = EmbeddingCache(sys.argv[1])
rng = np.random.default_rng(0)
for batch in range(40):  # 5 vectors of 1,536 bytes a batch: the first fit, the later ones do not
    v = rng.standard_normal((5, 384)).astype(np.float32)
    cache.put("m", [f"text {batch} {i}" for i in range(5)], v / np.linalg.norm(v, axis=1, keepdims=True))
got, found = cache.get("m", ["text 0 0", "text 39 4"], 384)
print(cache.writable, int(found.sum()))
'''


def test_a_full_disk_stops_storing_with_one_warning_and_the_run_goes_on(tmp_path):
    r = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path / "c.sqlite")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "1"]  # the first batch was stored and reads back; the last was not
    assert r.stderr.count("cannot be written") == 1 and "Traceback" not in r.stderr


# -- the hostile round: databases of other programs, a read-only filesystem --

def _schema(path):
    db = sqlite3.connect(path)
    try:
        return (db.execute("PRAGMA journal_mode").fetchone()[0],
                sorted(db.execute("SELECT name, sql FROM sqlite_master").fetchall()))
    finally:
        db.close()


@pytest.mark.parametrize("tables", [["CREATE TABLE accounts(id, name)"],
                                    ["CREATE TABLE embeddings(id INTEGER PRIMARY KEY, doc TEXT, vec BLOB)"],
                                    ["CREATE TABLE embeddings(model, text_sha256, dim, vector)",
                                     "CREATE TABLE notes(x)"]])
def test_another_programs_database_is_refused_and_left_untouched(tmp_path, tables):
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    for sql in tables:
        db.execute(sql)
    db.execute("INSERT INTO " + tables[0].split()[2].split("(")[0] + " DEFAULT VALUES")
    db.commit()
    db.close()
    before = (path.read_bytes(), _schema(path))
    with pytest.raises(InvalidValueError, match=r"app\.db is an SQLite database of another program \(tables: "):
        EmbeddingCache(path)
    assert (path.read_bytes(), _schema(path)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_a_cache_from_before_the_application_id_is_still_ours(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE embeddings (model TEXT NOT NULL, text_sha256 BLOB NOT NULL, dim INTEGER NOT NULL, "
               "vector BLOB NOT NULL, PRIMARY KEY (model, text_sha256)) WITHOUT ROWID")
    v = np.ones(4, np.float32) / 2
    db.execute("INSERT INTO embeddings VALUES (?, ?, ?, ?)", ("m", text_key("a"), 4, v.tobytes()))
    db.commit()
    db.close()
    with EmbeddingCache(path) as cache:
        vectors, found = cache.get("m", ["a"], 4)
    assert found.tolist() == [True] and np.array_equal(vectors[0], v)


def test_a_cache_on_a_read_only_filesystem_is_read(tmp_path, caplog):
    mount = tmp_path / "ro"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a filesystem needs root")
    try:
        v = np.eye(3, 8, dtype=np.float32)
        with EmbeddingCache(mount / "cache.sqlite") as cache:
            cache.put("m", ["a", "b", "c"], v)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        with caplog.at_level(logging.WARNING), EmbeddingCache(mount / "cache.sqlite") as cache:
            vectors, found = cache.get("m", ["a", "c", "z"], 8)
            cache.put("m", ["z"], v[:1])  # not stored, no error
        assert found.tolist() == [True, True, False] and np.array_equal(vectors[:2], v[[0, 2]])
        assert "read-only filesystem: it is read, and new vectors are not stored" in caplog.text
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_oh23_a_database_of_another_program_with_a_table_like_ours_is_refused(tmp_path):
    """Its own application id says whose it is, though its table has the cache's columns."""
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA application_id = 123")
    db.execute("CREATE TABLE embeddings(model TEXT, text_sha256 BLOB, dim INTEGER, vector BLOB, checksum BLOB)")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(InvalidValueError, match=r"another program \(tables: embeddings; application id 0x7b\)"):
        EmbeddingCache(path)
    assert path.read_bytes() == before
