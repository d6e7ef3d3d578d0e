"""Synthetic clustered unit vectors for the scale benchmarks, shaped like real chunk embeddings.

Each vector is a shared direction (the corpus' common component) + a topic centre + a point on
the arc between two of the topic's sub-topic directions + noise. The defaults give, at n = 3,000, a mean random-pair cosine of about 0.34, a mean
nearest-neighbour cosine of about 0.65 and a 16th-neighbour cosine of about 0.55 — close to the
all-MiniLM-L6-v2 embeddings of the Moby-Dick sample (0.34, 0.68, 0.57): neighbourhoods that are
not trivially separated.
"""

import numpy as np


def clustered_unit_vectors(n: int, d: int = 384, topics: int = 100, subtopics: int = 20, *,
                           shared: float = 1.0, topic: float = 0.8, sub: float = 0.6, noise: float = 1.0,
                           seed: int = 0) -> np.ndarray:
    """float32 (n, d) C-contiguous unit rows; the component weights are relative norms."""
    rng = np.random.default_rng(seed)

    def directions(*shape):
        v = rng.standard_normal((*shape, d), dtype=np.float32)
        return v / np.linalg.norm(v, axis=-1, keepdims=True)

    common = directions()
    centres = directions(topics)
    offsets = directions(topics, subtopics)
    t = rng.integers(0, topics, n)
    s1, s2 = rng.integers(0, subtopics, n), rng.integers(0, subtopics, n)
    # Each point sits between two sub-topics of its topic: the sub-topics blur into each other.
    mix = rng.random((n, 1), dtype=np.float32)
    between = mix * offsets[t, s1] + (1 - mix) * offsets[t, s2]
    between /= np.linalg.norm(between, axis=1, keepdims=True)
    x = shared * common + topic * centres[t] + sub * between + noise * directions(n)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x, dtype=np.float32)
