"""Cosine similarity of unit rows, computed in row blocks through BLAS.

Only the blocks on and above the diagonal are multiplied (half the work of a full product, like
BLAS syrk); each block below the diagonal is the transpose of one already computed. Row-blocked
products also avoid numpy's single-buffer ``X @ X.T`` path (OpenBLAS syrk), which threads poorly
and crashed with 2 threads at large n (numpy issue #19685).
"""

import numpy as np

DEFAULT_BLOCK = 2048


def similarity_matrix(x: np.ndarray, block: int = DEFAULT_BLOCK) -> np.ndarray:
    """Dense (n, n) float32 matrix of ``x @ x.T`` for float32, C-contiguous, unit rows ``x``."""
    n = x.shape[0]
    sim = np.empty((n, n), dtype=np.float32)
    for start in range(0, n, block):
        stop = min(start + block, n)
        np.matmul(x[start:stop], x[start:].T, out=sim[start:stop, start:])
        sim[stop:, start:stop] = sim[start:stop, stop:].T
    return sim
