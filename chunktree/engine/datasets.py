"""Synthetic embedding-like vectors of a chosen grain, for benchmarks, ``chunktree scale`` and tests.

``synthetic_embeddings`` (shape ``"text"``): a few large topics of 20 sub-topics each over a
direction they all share, shaped like embeddings of real text; ``topic_embeddings`` (shape
``"topics"``): many small topics, each row a topic's centre plus noise. Both are unit rows,
float32 (or written into ``out`` a block at a time, for a memory-mapped file of any size).
"""

from __future__ import annotations

import numpy as np

from chunktree.checks import normalised, one_of


def _directions(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random unit vectors along the last axis of ``shape``, float32."""
    v = rng.standard_normal(shape, dtype=np.float32)
    return normalised(v)


def synthetic_embeddings(n: int, d: int = 384, topics: int = 100, subtopics: int = 20, *,
                         shared: float = 1.0, topic: float = 0.8, sub: float = 0.6, noise: float = 1.0,
                         seed: int = 0, block: int = 65536, out: np.ndarray | None = None) -> np.ndarray:
    """float32 (n, d) C-contiguous unit rows shaped like real chunk embeddings, or written into
    ``out`` (n, d) of any float dtype (e.g. a float16 memory-mapped ``.npy``), which is returned.

    Each vector is a shared direction (the corpus' common component) + a topic centre + a point
    on the arc between two of the topic's sub-topic directions + noise; the weights are relative
    norms. The defaults give, at n = 3,000, a mean random-pair cosine of about 0.34, a mean
    nearest-neighbour cosine of about 0.65 and a 16th-neighbour cosine of about 0.55, close to the
    all-MiniLM-L6-v2 embeddings of the Moby-Dick sample (0.34, 0.68, 0.57). More ``topics`` make
    fuzzier neighbourhoods. Rows are made in blocks: the scratch is one block, not n rows.
    """
    rng = np.random.default_rng(seed)

    def directions(*shape: int) -> np.ndarray:
        return _directions(rng, (*shape, d))

    common, centres, offsets = directions(), directions(topics), directions(topics, subtopics)
    x = np.empty((n, d), dtype=np.float32) if out is None else out
    for start in range(0, n, block):
        m = min(block, n - start)
        t = rng.integers(0, topics, m)
        s1, s2 = rng.integers(0, subtopics, m), rng.integers(0, subtopics, m)
        mix = rng.random((m, 1), dtype=np.float32)  # between two sub-topics: they blur into each other
        between = mix * offsets[t, s1] + (1 - mix) * offsets[t, s2]
        between = normalised(between)
        part = shared * common + topic * centres[t] + sub * between + noise * directions(m)
        x[start:start + m] = normalised(part)
    return x


def topic_embeddings(n: int, topics: int, d: int = 384, *, noise: float = 0.9, seed: int = 0,
                     block: int = 100_000, out: np.ndarray | None = None) -> np.ndarray:
    """float32 (n, d) unit rows in ``topics`` small distinct topics, or written into ``out`` as
    ``synthetic_embeddings`` does: each row a random unit topic centre plus Gaussian noise of norm
    about ``noise`` (``c + noise * N(0, I) / sqrt(d)``), normalised. Rows are made ``block`` at a
    time, each block from its own share of the topics (10,000,000 rows of 100,000 topics: 1,000
    topics in each block of 100,000 rows, about 100 rows a topic), so the scratch is one block's
    rows and centres; with fewer topics than blocks, every block draws from all of them."""
    rng = np.random.default_rng(seed)

    def directions(m: int) -> np.ndarray:
        return _directions(rng, (m, d))

    blocks = -(-n // block)
    shared = directions(topics) if topics < blocks else None
    x = np.empty((n, d), dtype=np.float32) if out is None else out
    for b, start in enumerate(range(0, n, block)):
        m = min(block, n - start)
        centres = shared if shared is not None else directions(topics * (b + 1) // blocks - topics * b // blocks)
        part = centres[rng.integers(0, centres.shape[0], m)] + noise * rng.standard_normal((m, d), dtype=np.float32) / np.sqrt(d)
        x[start:start + m] = normalised(part)
    return x


SHAPES = ("text", "topics")


def synthetic(n: int, shape: str, topics: int, seed: int = 0, out: np.ndarray | None = None) -> np.ndarray:
    """The synthetic vectors of ``shape``: ``"text"`` (``synthetic_embeddings``: ``topics`` topics
    of 20 sub-topics over a shared direction, shaped like embeddings of real text) or
    ``"topics"`` (``topic_embeddings``: ``topics`` small distinct topics)."""
    one_of(shape, "shape", SHAPES)
    if shape == "text":
        return synthetic_embeddings(n, topics=topics, seed=seed, out=out)
    return topic_embeddings(n, topics, seed=seed, out=out)
