"""Chunks or arrays in, validated L2-normalised float32 vectors out: the entry of order and select."""

from __future__ import annotations

from typing import Any

import numpy as np

from chunktree.engine.chunking import Chunk


def positive_int(value: Any, name: str) -> int:
    """``value`` as an int >= 1, or a ValueError naming ``name`` and the value."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int; got {value!r}")
    return int(value)


def check_array(x: Any, name: str = "X") -> np.ndarray:
    """C-contiguous float32 (n, d) array with finite values, or an error naming the problem."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a numeric array; got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, d); got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name} must be finite; found {arr[tuple(bad)]} at index {tuple(int(b) for b in bad)}")
    return arr


def as_unit_rows(x: Any, name: str) -> np.ndarray:
    """``check_array``, then every row scaled to unit L2 norm; zero rows are an error."""
    arr = check_array(x, name)
    norms = np.linalg.norm(arr, axis=-1, keepdims=True)
    if (norms == 0).any():
        zero = np.flatnonzero(norms.reshape(-1) == 0)
        raise ValueError(f"{name} has zero-norm vectors at rows {zero[:10].tolist()}; cosine is undefined there")
    return arr / norms


def unit_vectors(items: Any, query: Any, embedder: Any, cache: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """Unit float32 chunk vectors (n, d) and the unit query vector (d,) or None.

    ``items`` are ``Chunk`` objects or strings (embedded with ``embedder``, default the default
    model, through ``cache``) or a float array (n, d); ``query`` a string or a vector (d,).
    """
    if isinstance(items, np.ndarray) or (len(items) and not isinstance(items[0], (str, Chunk))):
        x = np.asarray(items)
        if x.ndim != 2:
            raise ValueError(f"embeddings must be a 2-D array (n, d); got shape {x.shape}")
        texts = None
    else:
        texts = [c.text if isinstance(c, Chunk) else c for c in items]
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"chunks[{i}] must be a Chunk or str; got {type(t).__name__}")
        x = None
    n = len(items)
    if n == 0:
        raise ValueError("need at least one chunk; got 0")
    if texts is not None or isinstance(query, str):
        if embedder is None:
            from chunktree.models.embedder import Embedder

            embedder = Embedder()
        from chunktree.engine.embedding import embed_texts

        if texts is not None:
            x, _ = embed_texts(texts, embedder, cache)
        if isinstance(query, str):
            query = embedder.embed([query])[0]
    x = as_unit_rows(x, "embeddings")
    q = None
    if query is not None:
        q = np.asarray(query)
        if q.ndim != 1 or q.shape[0] != x.shape[1]:
            raise ValueError(f"query must be a string or a vector of {x.shape[1]} dims; got shape {q.shape}")
        q = as_unit_rows(q[None, :], "query")[0]
    return x, q
