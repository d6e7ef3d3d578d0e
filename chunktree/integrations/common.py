"""What the framework adapters share: vectors for a list of documents, and chunktree's decision
about them as one metadata entry per document.

Every adapter (``langchain``, ``llama_index``, ``haystack``) turns its framework's documents into
texts plus, where a document carries one, its embedding, and hands them to ``Ranking``:

- a document's own embedding is used when its length is the embedder's dimension (and
  ``use_embeddings`` is on); every other document's text is embedded with chunktree's embedder
  through the embedding cache. Turn ``use_embeddings`` off when the documents' embeddings come
  from another model of the same dimension: chunktree compares them with its own query vector.
- ``order`` and ``select`` return, for each document kept, its input index and the metadata that
  goes under ``METADATA_KEY`` on the adapter's copy of it (the caller's documents are never
  changed).

The metadata of an ordered document: ``position`` (reading position, 0 first), ``index`` (its
position in the input), ``parent_position`` and ``parent_id`` (its parent in the Chow-Liu tree,
None for the root), ``parent_similarity``, ``query_similarity`` (None without a query) and
``strategy``. Of a selected one: ``position``, ``index``, ``cluster``, ``cluster_size`` and
``distance`` (to the cluster's centre).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidTypeError, InvalidValueError, normalised, one_of, optional_positive_int, positive_int
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.engine.order import DEFAULT_STRATEGY, METHODS, STRATEGIES, order
from chunktree.engine.results import json_float
from chunktree.engine.select import select
from chunktree.models.backends import BACKENDS, PRECISIONS
from chunktree.models.registry import DEFAULT_MODEL

METADATA_KEY = "chunktree"
DEFAULT_MODEL_NAME = DEFAULT_MODEL.name


def check_cache(cache: Any) -> str | bool:
    """``cache``: True (the default cache file in the user cache dir), False (none) or a path."""
    if isinstance(cache, bool):
        return cache
    if isinstance(cache, (str, Path)) and str(cache):
        return str(cache)
    raise InvalidTypeError(f"cache must be True (the user cache), False (no cache) or a file path; got {cache!r}")


class Ranking:
    """chunktree's embedder, cache and settings for one adapter; the model loads on first use.

    Parameters
    ----------
    model
        a chunktree model name or ONNX file (``Embedder``).
    cache
        True: the embedding cache in the user cache dir; False: no cache; or a SQLite path.
    strategy
        the reading order (``order``'s strategies; default the measured default).
    method
        ``order``'s method (``"auto"``, ``"exact"``, ``"sparse"``).
    use_embeddings
        use a document's own embedding when it has the embedder's dimension.
    backend, precision
        what the embedder runs on (``Embedder``; default ``"auto"``: the fastest path that keeps
        agreement on this machine).
    """

    def __init__(self, model: str = DEFAULT_MODEL_NAME, cache: str | bool = True, strategy: str = DEFAULT_STRATEGY,
                 method: str = "auto", use_embeddings: bool = True, *, backend: str = "auto",
                 precision: str = "auto") -> None:
        if not isinstance(model, (str, Path)) or not str(model):
            raise InvalidTypeError(f"model must be a model name or an ONNX file path; got {model!r}")
        self.model = str(model)
        self.backend = one_of(backend, "backend", BACKENDS)
        self.precision = one_of(precision, "precision", PRECISIONS)
        self.cache_setting = check_cache(cache)
        self.strategy = one_of(strategy, "strategy", STRATEGIES)
        self.method = one_of(method, "method", METHODS)
        if not isinstance(use_embeddings, bool):
            raise InvalidTypeError(f"use_embeddings must be a bool; got {use_embeddings!r}")
        self.use_embeddings = use_embeddings
        self._embedder: Any = None
        self._cache: EmbeddingCache | None = None

    @property
    def embedder(self) -> Any:
        """The ``Embedder``, loaded on first use (the default model is shared by the process)."""
        if self._embedder is None:
            from chunktree.engine.inputs import default_embedder
            from chunktree.models.embedder import Embedder

            default = (self.model, self.backend, self.precision) == (DEFAULT_MODEL_NAME, "auto", "auto")
            self._embedder = default_embedder() if default else Embedder(self.model, backend=self.backend,
                                                                          precision=self.precision)
        return self._embedder

    @property
    def cache(self) -> EmbeddingCache | None:
        if self._cache is None and self.cache_setting is not False:
            self._cache = EmbeddingCache(None if self.cache_setting is True else self.cache_setting)
        return self._cache

    def embed(self, texts: Sequence[str], prompt: str = "document") -> np.ndarray:
        """float32 (len(texts), dim) unit vectors, through the cache, as documents or (``prompt``
        ``"query"``) as queries, for a model with prompts (``embed_texts``)."""
        if not texts:
            return np.empty((0, self.embedder.dim), np.float32)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidTypeError(f"text {i} must be a str; got {type(t).__name__}")
        return embed_texts(list(texts), self.embedder, self.cache, prompt=prompt)[0]

    def vectors(self, texts: Sequence[str], embeddings: Sequence[Any]) -> np.ndarray:
        """One vector per document: its own embedding where usable, else its text embedded."""
        dim = self.embedder.dim
        x = np.empty((len(texts), dim), np.float32)
        missing = []
        for i, e in enumerate(embeddings):
            v = None if e is None or not self.use_embeddings else np.asarray(e, dtype=np.float32).ravel()
            if v is not None and v.size == dim and np.all(np.isfinite(v)) and np.any(v):
                x[i] = normalised(v)
            else:
                missing.append(i)
        if missing:
            x[missing] = self.embed([texts[i] for i in missing])
        return x

    def order(self, texts: Sequence[str], embeddings: Sequence[Any], query: str | None, top_k: int | None,
              ids: Sequence[Any]) -> list[tuple[int, dict[str, Any]]]:
        """(input index, metadata) of the documents in reading order, the first ``top_k``."""
        top_k = optional_positive_int(top_k, "top_k")
        if query is not None and not isinstance(query, str):
            raise InvalidTypeError(f"query must be a str or None; got {type(query).__name__}")
        if self.strategy == "dense" and not query:
            raise InvalidValueError("strategy 'dense' orders by query similarity and needs a query")
        if not texts:
            return []
        x = self.vectors(texts, embeddings)
        q = self.embed([query], "query")[0] if query else None
        result = order(x, q, strategy=self.strategy, method=self.method)
        position = np.empty(len(texts), np.int64)
        position[result.order] = np.arange(len(texts))
        out: list[Any] = []
        for pos, i in enumerate(result.order[:top_k].tolist()):
            p = None if result.parent is None or result.parent[i] < 0 else int(result.parent[i])
            out.append((i, {
                "position": pos, "index": i, "strategy": self.strategy,
                "parent_position": None if p is None else int(position[p]),
                "parent_id": None if p is None else ids[p],
                "parent_similarity": None if p is None or result.parent_similarity is None
                else json_float(result.parent_similarity[i]),
                "query_similarity": None if result.query_similarity is None else float(result.query_similarity[i]),
            }))
        return out

    def select(self, texts: Sequence[str], embeddings: Sequence[Any], k: int, per_cluster: int = 1,
               seed: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """(input index, metadata) of ``k`` representatives (all documents when there are fewer),
        cluster by cluster."""
        k, per_cluster = positive_int(k, "k"), positive_int(per_cluster, "per_cluster")
        if not texts:
            return []
        x = self.vectors(texts, embeddings)
        result = select(x, min(k, len(texts)), per_cluster=per_cluster, seed=seed)
        out: list[Any] = []
        for c in result.clusters:
            for i, d in zip(c.representatives, c.distances):
                out.append((i, {"position": len(out), "index": i, "cluster": c.id, "cluster_size": c.size,
                                "distance": float(d)}))
        return out
