"""A persistent embedding cache in SQLite, keyed by (vectors id: model, backend and precision; SHA-256 of the text).

SQLite in WAL mode lets several processes read and write the same file: writers take turns under
SQLite's own locking (waiting up to ``timeout`` seconds), and a row written twice by two processes
is harmless, since the same key always maps to the same vector. Within a process, one cache may be
used from several threads (the service's requests): its connection is used by one at a time.

What is read is verified, not trusted:

- every row carries a checksum of its key and vector bytes; a row whose bytes no longer match
  (or, in a cache written before checksums, a vector that is not finite and of unit norm) is
  reported in a warning, treated as a miss, re-embedded and overwritten;
- a file SQLite cannot read (garbage bytes, a truncated file) is **quarantined**: renamed aside
  to ``<name>.corrupt-<UTC time>``, with a warning naming both paths, and a new empty cache takes
  its place. Nothing is lost that the cache could still vouch for, and the run goes on. Only a
  damaged database (it starts with SQLite's header) or a file named like a cache (``.sqlite``,
  ``.sqlite3``, ``.db``) is moved aside: any other existing file given as the cache is refused,
  never moved or written;
- a readable SQLite database that is not a chunktree cache (another program's: its tables or its
  ``application_id`` say so) is refused before anything is written to it;
- a cache that cannot be written (a full disk, a read-only file or filesystem) is read as far as it
  can be, and the run goes on without storing, after one warning.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from chunktree.checks import STORED_UNIT_TOLERANCE, InvalidValueError, is_unit
from chunktree.paths import cache_dir

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    text_sha256 BLOB NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    checksum BLOB,
    PRIMARY KEY (model, text_sha256)
) WITHOUT ROWID
"""
SQLITE_HEADER = b"SQLite format 3\x00"
APPLICATION_ID = 0x63547265  # "cTre" in the database header: a chunktree embedding cache
_OWN_COLUMNS = {"model", "text_sha256", "dim", "vector", "checksum"}
CACHE_SUFFIXES = (".sqlite", ".sqlite3", ".db")
# SQLite limits the number of host parameters per statement; stay well below it.
_LOOKUP_BATCH = 500


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    """True when SQLite says the file is damaged or not a database; False for a busy, locked or
    unwritable one, which must never be moved aside."""
    name = getattr(exc, "sqlite_errorname", None)  # Python >= 3.11
    if name is not None:
        return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
    text = str(exc)
    return not isinstance(exc, sqlite3.OperationalError) and ("malformed" in text or "not a database" in text)


def row_checksum(model: str, key: bytes, vector: bytes) -> bytes:
    """8 bytes that change when any byte of the row's model, key or vector changes."""
    return hashlib.blake2b(model.encode("utf-8") + key + vector, digest_size=8).digest()


def _read_only_filesystem(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _verified(model: str, key: bytes, dim: int, blob: bytes, checksum: bytes | None) -> np.ndarray | None:
    """The stored vector if it passes its check, else None: its checksum, or for a row written
    before checksums, finite values of unit norm."""
    if len(blob) != 4 * dim:
        return None
    v = np.frombuffer(blob, dtype=np.float32)
    if checksum is not None:
        return v if row_checksum(model, key, blob) == checksum else None
    return v if is_unit(v, STORED_UNIT_TOLERANCE) else None


class EmbeddingCache:
    """Vectors of texts already embedded, per model.

    Parameters
    ----------
    path
        SQLite file; default ``<cache dir>/embeddings.sqlite`` (see ``chunktree.paths``).
    timeout
        seconds to wait for another process's write lock.

    Attributes
    ----------
    writable
        False once a write failed (a full disk, a read-only file, a lock held past ``timeout``):
        lookups go on, nothing more is stored.
    """

    def __init__(self, path: str | Path | None = None, *, timeout: float = 60.0) -> None:
        self.path = Path(path) if path is not None else cache_dir() / "embeddings.sqlite"
        if self.path.is_dir():
            raise InvalidValueError(f"embedding cache {self.path} is a folder; give the path of a file (or no cache)")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidValueError(f"embedding cache {self.path}: cannot create its folder {self.path.parent} "
                                    f"({exc.strerror or exc})") from None
        self._refuse_a_file_of_yours()
        self.timeout = timeout
        self._lock = threading.RLock()  # the connection is shared by threads, one statement at a time
        self.writable = True  # False after a write failed (a full disk, a read-only file): reads go on
        if self.path.exists() and _read_only_filesystem(self.path):
            self._db = self._open_read_only()
            return
        self._refuse_a_database_of_another_program()
        try:
            try:
                self._db = self._open()
            except sqlite3.DatabaseError as exc:
                self._quarantine(exc)  # re-raises what is not damage
        except sqlite3.OperationalError as exc:
            raise InvalidValueError(f"embedding cache {self.path} cannot be opened ({exc}); give another path, "
                                    "or no cache") from None

    def _refuse_a_file_of_yours(self) -> None:
        """An existing file that is neither an SQLite database nor named like a cache is not ours to move."""
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise InvalidValueError(f"embedding cache {self.path} cannot be read ({exc.strerror or exc})") from None
        if head and head != SQLITE_HEADER and self.path.suffix.lower() not in CACHE_SUFFIXES:
            raise InvalidValueError(f"embedding cache {self.path} is not an SQLite file (it starts with {head!r}): "
                                    "a damaged cache is moved aside, but not a file of yours. Give a new path or an "
                                    "existing cache (or no cache)")

    def _uri(self, options: str) -> str:
        return f"file:{urllib.parse.quote(str(self.path.absolute()))}?{options}"

    def _refuse_a_database_of_another_program(self) -> None:
        """A database another program made (tables of its own, or its own application id) is not
        ours to switch to WAL, add a table to or alter: it is read, read-only, and refused."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        try:
            db = sqlite3.connect(self._uri("mode=ro"), uri=True, timeout=self.timeout)
            try:
                app = db.execute("PRAGMA application_id").fetchone()[0]
                tables = {name: {c for (c,) in db.execute("SELECT name FROM pragma_table_info(?)", (name,))}
                          for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            finally:
                db.close()
        except sqlite3.DatabaseError:
            return  # damaged (moved aside by the open that follows) or busy: the open says which
        ours = app == APPLICATION_ID or (app == 0 and set(tables) <= {"embeddings"} and
                                         tables.get("embeddings", _OWN_COLUMNS) <= _OWN_COLUMNS)
        if not ours:
            raise InvalidValueError(
                f"embedding cache {self.path} is an SQLite database of another program (tables: "
                f"{', '.join(sorted(tables)) or 'none'}; application id {app:#x}), not a chunktree cache; it was "
                "left untouched. Give a new path or an existing chunktree cache (or no cache)")

    def _open_read_only(self) -> sqlite3.Connection:
        """The cache of a read-only filesystem, read as an immutable file (WAL needs a writable
        folder for its shared memory)."""
        self.writable = False
        try:
            db = sqlite3.connect(self._uri("mode=ro&immutable=1"), uri=True, timeout=self.timeout,
                                 isolation_level=None, check_same_thread=False)
            db.execute("SELECT model, text_sha256, dim, vector, checksum FROM embeddings LIMIT 0")
        except sqlite3.DatabaseError as exc:
            raise InvalidValueError(f"embedding cache {self.path} is on a read-only filesystem and cannot be read "
                                    f"as a chunktree cache ({exc}); give another path, or no cache") from None
        log.warning("embedding cache %s is on a read-only filesystem: it is read, and new vectors are not stored",
                    self.path)
        return db

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        try:
            if db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:  # a write: only once
                db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(embeddings)")}
            if "checksum" not in columns:  # a cache written before checksums
                db.execute("ALTER TABLE embeddings ADD COLUMN checksum BLOB")
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _quarantine(self, exc: sqlite3.DatabaseError) -> None:
        """Move a damaged cache file aside and start a new one; re-raise any other database error."""
        if not is_corrupt(exc):
            raise exc
        if getattr(self, "_db", None) is not None:
            self._db.close()
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        self.path.rename(aside)
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.rename(aside.with_name(aside.name + suffix))
        log.warning("embedding cache %s cannot be read (%s); moved it to %s and started a new one",
                    self.path, exc, aside)
        self._db = self._open()

    def get(self, model: str, texts: Sequence[str], dim: int, out: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
        """Look ``texts`` up, a few hundred at a time (memory: the vectors' array and one batch).

        Returns
        -------
        vectors
            float32 (len(texts), dim): ``out`` when given (e.g. a memory-mapped file), else a
            new array. Rows of misses are not written (zero in a new array).
        found
            bool (len(texts),); True where the vector came from the cache.
        """
        keys = [text_key(t) for t in texts]
        vectors = np.zeros((len(keys), dim), dtype=np.float32) if out is None else out
        found = np.zeros(len(keys), dtype=bool)
        bad = 0
        for start in range(0, len(keys), _LOOKUP_BATCH):
            part = keys[start:start + _LOOKUP_BATCH]
            try:
                rows = self._lookup(model, dim, part)
            except sqlite3.DatabaseError as exc:
                with self._lock:
                    self._quarantine(exc)  # a new, empty cache: everything from here on is a miss
                break
            for i, key in enumerate(part, start):
                row = rows.get(key)
                if row is None:
                    continue
                v = _verified(model, key, dim, *row)
                if v is None:
                    bad += 1
                    continue
                vectors[i] = v
                found[i] = True
        if bad:
            log.warning("embedding cache %s: %d stored vector(s) failed their check; they are treated as "
                        "misses and will be re-embedded", self.path, bad)
        return vectors, found

    def _lookup(self, model: str, dim: int, keys: list[bytes]) -> dict[bytes, tuple[bytes, bytes | None]]:
        marks = ",".join("?" * len(keys))
        with self._lock:
            return {key: (blob, checksum) for key, blob, checksum in self._db.execute(
                f"SELECT text_sha256, vector, checksum FROM embeddings WHERE model = ? AND dim = ? "
                f"AND text_sha256 IN ({marks})", (model, dim, *keys))}

    def put(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store ``vectors`` (float32, (len(texts), dim)) in one transaction."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise InvalidValueError(f"vectors must have shape ({len(texts)}, dim); got {vectors.shape}")
        dim = vectors.shape[1]
        rows = []
        for t, v in zip(texts, vectors):
            key, blob = text_key(t), v.tobytes()
            rows.append((model, key, dim, blob, row_checksum(model, key, blob)))
        with self._lock:
            if not self.writable:
                return
            try:
                try:
                    self._insert(rows)
                except sqlite3.DatabaseError as exc:
                    self._quarantine(exc)  # re-raises what is not damage
                    self._insert(rows)
            except sqlite3.OperationalError as exc:  # full, read-only, locked past the timeout
                self.writable = False
                log.warning("embedding cache %s cannot be written (%s); going on without storing new vectors",
                            self.path, exc)

    def _insert(self, rows: list[tuple[str, bytes, int, bytes, bytes]]) -> None:
        # REPLACE: a row that failed its check on reading is overwritten by its re-embedded vector.
        with self._db:  # BEGIN ... COMMIT, or ROLLBACK on error
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("INSERT OR REPLACE INTO embeddings (model, text_sha256, dim, vector, checksum) "
                                 "VALUES (?, ?, ?, ?, ?)", rows)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
