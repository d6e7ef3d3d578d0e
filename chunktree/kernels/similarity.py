"""Cosine similarity of unit rows, computed in row blocks through BLAS.

Row-blocked products ``X[i:j] @ X.T`` avoid numpy's single-buffer ``X @ X.T`` path (OpenBLAS
syrk), which threads poorly and crashed with 2 threads at large n (numpy issue #19685).
"""

import numpy as np

DEFAULT_BLOCK = 2048


def similarity_matrix(x: np.ndarray, block: int = DEFAULT_BLOCK) -> np.ndarray:
    """Dense (n, n) float32 matrix of ``x @ x.T`` for float32, C-contiguous, unit rows ``x``."""
    n = x.shape[0]
    sim = np.empty((n, n), dtype=np.float32)
    for start in range(0, n, block):
        np.matmul(x[start:start + block], x.T, out=sim[start:start + block])
    return sim
