"""Embed texts through the cache: only texts the cache has not seen for this model are embedded."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from chunktree.engine.cache import EmbeddingCache
from chunktree.models.embedder import Embedder


@dataclass(frozen=True)
class EmbedStats:
    """What one ``embed_texts`` call did: the model, texts in, served by the cache, embedded
    (repeated texts once), seconds spent."""

    model: str
    texts: int
    cache_hits: int
    embedded: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def embed_texts(
    texts: Sequence[str],
    embedder: Embedder,
    cache: EmbeddingCache | None = None,
    *,
    progress: bool = False,
) -> tuple[np.ndarray, EmbedStats]:
    """Embed ``texts`` with ``embedder``, reusing and filling ``cache`` when given.

    Returns
    -------
    vectors : float32 (len(texts), embedder.dim), unit rows.
    stats : counts and time.
    """
    t0 = time.perf_counter()
    texts = list(texts)
    if cache is None:
        vectors, found = np.zeros((len(texts), embedder.dim), np.float32), np.zeros(len(texts), bool)
    else:
        vectors, found = cache.get(embedder.model_id, texts, embedder.dim)
    missing = np.flatnonzero(~found).tolist()
    # Repeated texts are embedded once.
    unique: dict[str, list[int]] = {}
    for i in missing:
        unique.setdefault(texts[i], []).append(i)
    if unique:
        new = embedder.embed(list(unique), progress=progress)
        for row, rows in enumerate(unique.values()):
            vectors[rows] = new[row]
        if cache is not None:
            cache.put(embedder.model_id, list(unique), new)
    stats = EmbedStats(embedder.model_id, len(texts), int(found.sum()), len(unique), time.perf_counter() - t0)
    return vectors, stats
