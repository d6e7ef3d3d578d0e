"""The one boundary where user input becomes vectors: every job (order, select, read) enters here.

``prepare(items, query)`` decides once what ``items`` are — ``Chunk`` objects, strings, or an
embedding array (n, d) — embeds what needs embedding (through the cache), checks everything, and
returns ``Inputs``: unit float32 vectors, the unit query vector, the texts and chunks for
provenance, and what the embedding cost (``EmbedStats``), so no caller has to embed again.

``default_embedder()`` is the one place a default ``Embedder`` is built (once per process).
Token counts follow ``Embedder.count_tokens``: content tokens, special tokens excluded.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunktree.checks import InvalidTypeError, InvalidValueError, text, unit_rows
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.chunking import Chunk
from chunktree.engine.embedding import EmbedStats, embed_texts
from chunktree.models.embedder import Embedder
from chunktree.progress import Progress

# Dimensions whose bytes key the duplicate search (``Inputs.first_copies``): distinct embeddings
# differ in nearly every dimension, and rows sharing a key are compared whole.
HASHED_DIMS = 16


@functools.lru_cache(maxsize=1)
def default_embedder() -> Embedder:
    """The default model (all-MiniLM-L6-v2), loaded on first use and shared by the process."""
    return Embedder()


@dataclass(frozen=True)
class Inputs:
    """Validated input of a job.

    Attributes
    ----------
    vectors
        float32 (n, d), C-contiguous, unit rows (float16 where ``prepare`` was asked to keep it).
    query
        float32 (d,) unit vector, or None.
    query_text
        the query when it was given as a string.
    items
        what the caller passed when it was chunks or strings (for provenance), else None.
    texts
        the chunk texts when known, else None.
    embedding
        what embedding the chunks cost; None when vectors were given.
    embedder
        the embedder used for texts (None when nothing needed embedding).
    """

    vectors: np.ndarray
    query: np.ndarray | None
    query_text: str | None
    items: Sequence[Chunk] | Sequence[str] | None
    texts: list[str] | None
    embedding: EmbedStats | None
    embedder: Any

    @property
    def n(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def chunks(self) -> Sequence[Chunk] | None:
        """The ``Chunk`` objects, when chunks (not strings or vectors) were given."""
        if self.items is not None and isinstance(self.items[0], Chunk):
            return self.items  # type: ignore[return-value]
        return None

    def first_copies(self) -> np.ndarray:
        """int64 (n,): for each chunk, the first chunk with the same vector (itself if none).

        Equal texts embed to equal vectors, so this finds exact-duplicate chunks too. A hash of
        the bytes of ``HASHED_DIMS`` fixed dimensions of each row (integer arithmetic: a float
        product of equal rows can differ in its last bit with the row's place in a BLAS block)
        groups the candidates in O(n); rows that share a hash are compared exactly, whole.
        """
        x, n = self.vectors, self.n
        words = x.view(np.uint16 if x.itemsize == 2 else np.uint32)
        rng = np.random.default_rng(0)
        dims = np.sort(rng.choice(words.shape[1], min(HASHED_DIMS, words.shape[1]), replace=False))
        weights = rng.integers(1, 2**63, dims.size, dtype=np.uint64) | np.uint64(1)
        keys = (words[:, dims].astype(np.uint64) * weights).sum(axis=1)
        order = np.argsort(keys, kind="stable")  # equal keys keep input order
        sorted_keys = keys[order]
        starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        ends = np.r_[starts[1:], n]
        first = np.arange(n, dtype=np.int64)
        row = np.dtype((np.void, x.dtype.itemsize * x.shape[1]))
        for s, e in zip(starts[ends - starts > 1], ends[ends - starts > 1]):  # runs of equal keys: rare
            run = order[s:e]
            _, at, inverse = np.unique(np.ascontiguousarray(x[run]).view(row).ravel(), return_index=True,
                                       return_inverse=True)
            first[run] = run[at[inverse.ravel()]]
        return first

    def token_counts(self) -> np.ndarray:
        """Tokens of each chunk (``Embedder.count_tokens``); needs texts."""
        if self.texts is None:
            raise InvalidValueError("token counts need the chunk texts; with embeddings, pass tokens= "
                                    "(the token count of each chunk)")
        return (self.embedder or default_embedder()).count_tokens(self.texts)


def texts_of(items: Sequence[Any], name: str = "chunks") -> list[str]:
    """The text of each ``Chunk`` or string in ``items``; a TypeError names the first other item."""
    texts = []
    for i, item in enumerate(items):
        if isinstance(item, Chunk):
            texts.append(item.text)
        elif isinstance(item, str):
            texts.append(item)
        else:
            raise InvalidTypeError(f"{name}[{i}] must be a Chunk or str; got {type(item).__name__}")
    return texts


def _is_vectors(items: Any) -> bool:
    if isinstance(items, np.ndarray):
        return True
    return len(items) > 0 and not isinstance(items[0], (str, Chunk))


def prepare(
    items: Sequence[Chunk] | Sequence[str] | np.ndarray,
    query: str | np.ndarray | None = None,
    *,
    embedder: Any = None,
    cache: EmbeddingCache | None = None,
    name: str = "chunks",
    progress: Progress = False,
    ray: str | None = None,
    keep_float16: bool = False,
) -> Inputs:
    """Turn chunks, strings or an embedding array (and a query string or vector) into ``Inputs``.

    Texts are embedded with ``embedder`` (default: ``default_embedder()``) through ``cache``, on
    the Ray cluster at ``ray`` when given (``engine.distributed``). Every check runs before
    anything is embedded. ``keep_float16`` keeps float16 embeddings float16 (``checks.unit_rows``).
    """
    if isinstance(items, (str, bytes)):
        raise InvalidTypeError(f"{name} must be a sequence of chunks or strings, or an array; got a single "
                               f"{type(items).__name__}")
    query_vector = None
    if query is not None and not isinstance(query, str):
        query_vector = np.asarray(query)
        if query_vector.ndim != 1:
            raise InvalidValueError(f"query must be a string or a vector (d,); got shape {query_vector.shape}", param="query")
    elif isinstance(query, str):
        text(query, "query")
    if _is_vectors(items):
        x, texts, given = np.asarray(items), None, None
        if x.ndim != 2:
            raise InvalidValueError(f"embeddings must be a 2-D array (n, d); got shape {x.shape}")
    else:
        texts, given, x = texts_of(items, name), items, None  # type: ignore[arg-type]  # not vectors: a sequence
    n = len(items)
    if n == 0:
        raise InvalidValueError(f"need at least one chunk; got 0 {name}")
    stats = None
    if texts is not None or isinstance(query, str):
        embedder = embedder or default_embedder()
        if texts is not None:
            x, stats = embed_texts(texts, embedder, cache, progress=progress, ray=ray, prompt="document")
    query_text = query if isinstance(query, str) else None
    if query_text is not None:
        query_vector = embed_texts([query_text], embedder, cache, prompt="query")[0][0]
    vectors = unit_rows(x, "embeddings", keep_float16=keep_float16)
    q = None
    if query_vector is not None:
        if query_vector.shape[0] != vectors.shape[1]:
            raise InvalidValueError(f"query must be a string or a vector of {vectors.shape[1]} dims; "
                                    f"got shape {query_vector.shape}", param="query")
        q = unit_rows(query_vector[None, :], "query")[0]
    return Inputs(vectors, q, query_text, given, texts, stats,  # type: ignore[arg-type]  # given: not vectors
                  embedder if texts is not None else None)
