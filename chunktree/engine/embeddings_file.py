"""Embeddings on disk with their chunks: ``X.npy`` (one row per chunk) and ``X.jsonl`` (the chunks'
text and provenance, one per line, in the same order).

``write_embeddings`` embeds chunks into such a pair; ``load_embeddings`` maps the vectors (never
reading them into memory) and reads the chunks back, checked against each other, for
``order(vectors, items=chunks)``. ``chunktree embed`` writes the pair, ``chunktree order
--embeddings`` reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, json_loads
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.chunking import Chunk
from chunktree.engine.embedding import EmbedStats, embed_texts
from chunktree.engine.results import dumps
from chunktree.files import replacing, replacing_npy
from chunktree.progress import Progress


def chunks_path(vectors_path: Path) -> Path:
    """The chunks file that goes with a vectors file: ``X.jsonl`` beside ``X.npy``."""
    return Path(vectors_path).with_suffix(".jsonl")


def write_embeddings(chunks: Sequence[Chunk], path: Path, embedder: Any, cache: EmbeddingCache | None = None, *,
                     progress: Progress = False, ray: str | None = None) -> EmbedStats:
    """Embed ``chunks`` into ``path`` (float32, one row per chunk) and write the chunks beside it
    (``chunks_path``). The vectors go into a memory map as each batch comes, so a large corpus is
    not held in memory, with their space reserved first; each file appears whole or not at all
    (``files.replacing``), and a run that is stopped resumes through the cache's commits."""
    with replacing(chunks_path(path)) as f, replacing_npy(path, (len(chunks), embedder.dim), np.float32) as vectors:
        for c in chunks:
            f.write(dumps(c.to_dict()) + "\n")
        _, stats = embed_texts([c.text for c in chunks], embedder, cache, progress=progress, ray=ray, out=vectors,
                               prompt="document")
    return stats


def load_embeddings(path: Path, chunks: Path | None = None) -> tuple[np.ndarray, list[Chunk] | None]:
    """The vectors of ``path`` (memory-mapped) and their chunks, checked against each other.

    The chunks come from ``chunks``, or from the chunks file beside ``path`` (``chunks_path``);
    without either, None (the rows have no text and are named by their index). Errors name the
    file and the line.
    """
    try:
        vectors = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise InvalidValueError(f"embeddings {path}: not a readable .npy file ({exc})", param="embeddings") from None
    if vectors.ndim != 2 or vectors.dtype not in (np.float32, np.float16, np.float64):
        raise InvalidValueError(f"embeddings {path}: need a 2-D float array; got {vectors.dtype} {vectors.shape}",
                                param="embeddings")
    where = chunks or chunks_path(path)
    if chunks is None and not where.exists():
        return vectors, None
    rows = []
    try:
        with where.open(encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                try:
                    rows.append(Chunk.from_dict(json_loads(line)))
                except ValueError as exc:
                    raise InvalidValueError(f"chunks {where}:{line_no}: not a chunk row ({exc})", param="chunks") from None
    except OSError as exc:
        raise InvalidValueError(f"chunks {where}: cannot read it ({exc.strerror or exc})", param="chunks") from None
    except UnicodeDecodeError as exc:
        raise InvalidValueError(f"chunks {where}: not UTF-8 text ({exc.reason} at byte {exc.start} of a line)",
                                param="chunks") from None
    if len(rows) != vectors.shape[0]:
        raise InvalidValueError(f"embeddings {path} has {vectors.shape[0]} rows but its chunks file {where} has "
                                f"{len(rows)} chunks", param="embeddings")
    return vectors, rows
