"""A persistent embedding cache in SQLite, keyed by (model id, SHA-256 of the text).

SQLite in WAL mode lets several processes read and write the same file: writers take turns under
SQLite's own locking (waiting up to ``timeout`` seconds), and ``INSERT OR IGNORE`` makes a row
written twice by two processes harmless, since the same key always maps to the same vector.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from chunktree.checks import InvalidValueError
from chunktree.paths import cache_dir

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    text_sha256 BLOB NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, text_sha256)
) WITHOUT ROWID
"""
# SQLite limits the number of host parameters per statement; stay well below it.
_LOOKUP_BATCH = 500


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class EmbeddingCache:
    """Vectors of texts already embedded, per model.

    Parameters
    ----------
    path : SQLite file; default ``<cache dir>/embeddings.sqlite`` (see ``chunktree.paths``).
    timeout : seconds to wait for another process's write lock.
    """

    def __init__(self, path: str | Path | None = None, *, timeout: float = 60.0) -> None:
        self.path = Path(path) if path is not None else cache_dir() / "embeddings.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def get(self, model: str, texts: Sequence[str], dim: int) -> tuple[np.ndarray, np.ndarray]:
        """Look ``texts`` up.

        Returns
        -------
        vectors : float32 (len(texts), dim); rows of misses are zero.
        found : bool (len(texts),); True where the vector came from the cache.
        """
        keys = [text_key(t) for t in texts]
        rows: dict[bytes, bytes] = {}
        for i in range(0, len(keys), _LOOKUP_BATCH):
            part = keys[i:i + _LOOKUP_BATCH]
            marks = ",".join("?" * len(part))
            rows.update(self._db.execute(
                f"SELECT text_sha256, vector FROM embeddings WHERE model = ? AND dim = ? AND text_sha256 IN ({marks})",
                (model, dim, *part),
            ).fetchall())
        vectors = np.zeros((len(texts), dim), dtype=np.float32)
        found = np.zeros(len(texts), dtype=bool)
        for i, key in enumerate(keys):
            blob = rows.get(key)
            if blob is not None:
                vectors[i] = np.frombuffer(blob, dtype=np.float32)
                found[i] = True
        return vectors, found

    def put(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store ``vectors`` (float32, (len(texts), dim)) in one transaction."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise InvalidValueError(f"vectors must have shape ({len(texts)}, dim); got {vectors.shape}")
        dim = vectors.shape[1]
        rows = [(model, text_key(t), dim, v.tobytes()) for t, v in zip(texts, vectors)]
        with self._db:  # BEGIN ... COMMIT, or ROLLBACK on error
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT OR IGNORE INTO embeddings (model, text_sha256, dim, vector) VALUES (?, ?, ?, ?)", rows)

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
