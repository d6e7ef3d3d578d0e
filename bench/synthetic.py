"""Synthetic clustered unit vectors for the scale benchmarks: topics with sub-topics, d = 384."""

import numpy as np


def clustered_unit_vectors(n: int, d: int = 384, topics: int = 100, subtopics: int = 5,
                           noise: float = 0.8, seed: int = 0) -> np.ndarray:
    """float32 (n, d) unit rows: topic centre + sub-topic offset + noise (within-topic cosine ~0.5)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((topics, d), dtype=np.float32) / np.sqrt(d)
    subs = centres[:, None, :] + 0.6 * rng.standard_normal((topics, subtopics, d), dtype=np.float32) / np.sqrt(d)
    topic = rng.integers(0, topics, n)
    sub = rng.integers(0, subtopics, n)
    x = subs[topic, sub]
    x += noise * rng.standard_normal((n, d), dtype=np.float32) / np.sqrt(d)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x, dtype=np.float32)
