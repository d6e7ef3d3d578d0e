"""Embed texts through the cache: only texts the cache has not seen for this model, backend and
precision (``Embedder.vectors_id``) are embedded."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, positive_int, unicode
from chunktree.engine.cache import EmbeddingCache
from chunktree.models.embedder import Embedder
from chunktree.progress import Progress
from chunktree.progress import progress as progress_counter


@dataclass(frozen=True)
class EmbedStats:
    """What one ``embed_texts`` call did: the model, the backend and precision it ran on and why
    (``Embedder.choice``), texts in, served by the cache, embedded (repeated texts once), seconds
    spent."""

    model: str
    backend: str
    precision: str
    choice: str
    texts: int
    cache_hits: int
    embedded: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Texts embedded between two cache commits: an interrupted run loses at most this many.
COMMIT_EVERY = 256


def embed_texts(
    texts: Sequence[str],
    embedder: Embedder,
    cache: EmbeddingCache | None = None,
    *,
    progress: Progress = False,
    commit_every: int = COMMIT_EVERY,
    ray: str | None = None,
    out: np.ndarray | None = None,
    prompt: str | None = None,
) -> tuple[np.ndarray, EmbedStats]:
    """Embed ``texts`` with ``embedder``, reusing and filling ``cache`` when given.

    New vectors are committed to the cache every ``commit_every`` texts, so a run that is
    killed resumes where it stopped. ``progress`` shows a bar counting texts. ``ray``: embed
    the same batches on the Ray cluster at that address (``"local"``: one on this machine; see
    ``engine.distributed``), committed as they come back. ``out``: a writable float32 array
    (len(texts), embedder.dim) the vectors are written into as they come, e.g. a memory-mapped
    ``.npy`` (``np.lib.format.open_memmap``), so that a large corpus is not held in memory.
    ``prompt``: ``"query"`` or ``"document"``, to put the model's prompt of that name before each
    text (``Embedder.prompt``; nothing for a model without prompts); the cache keys by the text
    as embedded, prompt included.

    Returns
    -------
    vectors
        float32 (len(texts), embedder.dim), unit rows (``out`` when given).
    stats
        counts and time.
    """
    positive_int(commit_every, "commit_every")
    texts = list(texts)
    for i, t in enumerate(texts):  # before the cache hashes them or anything is embedded
        unicode(t, f"texts[{i}]")
    prefix = embedder.prompt(prompt) if prompt is not None else ""
    if prefix:
        texts = [prefix + t for t in texts]
    if out is not None and (getattr(out, "shape", None) != (len(texts), embedder.dim) or out.dtype != np.float32
                            or not out.flags.writeable):
        raise InvalidValueError(f"out must be a writable float32 array of shape ({len(texts)}, {embedder.dim}); "
                                f"got {getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
    if ray is not None:  # joined before any work, even when the cache has every vector
        from chunktree.engine.distributed import connect

        connect(ray)
    t0 = time.perf_counter()
    if cache is None:
        vectors = np.zeros((len(texts), embedder.dim), np.float32) if out is None else out
        found = np.zeros(len(texts), bool)
    else:
        vectors, found = cache.get(embedder.vectors_id, texts, embedder.dim, out)
    missing = np.flatnonzero(~found).tolist()
    # Repeated texts are embedded once.
    unique: dict[str, list[int]] = {}
    for i in missing:
        unique.setdefault(texts[i], []).append(i)
    # Similar lengths together, so every committed slice pads little (the embedder sorts by tokens within it).
    todo = sorted(unique.items(), key=lambda item: len(item[0]))
    # Counted in characters, which the cost follows, not texts: short texts go first.
    bar = progress_counter(sum(len(text) for text, _ in todo), "embed", "char", enabled=progress if todo else False)
    parts = [todo[start:start + commit_every] for start in range(0, len(todo), commit_every)]
    batches = [[text for text, _ in part] for part in parts]
    if ray is None:
        results: Iterator[tuple[int, np.ndarray]] = ((i, embedder.embed(batch)) for i, batch in enumerate(batches))
    else:
        from chunktree.engine.distributed import embed_batches

        results = embed_batches(batches, embedder, ray) if batches else iter(())
    done = 0
    for i, new in results:
        part = parts[i]
        for row, (_, rows) in enumerate(part):
            vectors[rows] = new[row]
        if cache is not None:
            cache.put(embedder.vectors_id, [text for text, _ in part], new)
        done += len(part)
        bar.set_postfix_str(f"{done}/{len(todo)} texts")
        bar.update(sum(len(text) for text, _ in part))
    bar.close()
    stats = EmbedStats(embedder.model_id, embedder.backend, embedder.precision, embedder.choice.reason, len(texts),
                       int(found.sum()), len(unique), time.perf_counter() - t0)
    return vectors, stats
