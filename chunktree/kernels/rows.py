"""Unit rows kept as float16 or float32, read as float32 a block at a time.

Ordering keeps float16 vectors as they are (a memory-mapped ``.npy`` stays on disk, in the page
cache), so 10 million 384-dim rows take 7.7 GB instead of 15.4 GB. BLAS has no float16 products
and Numba no float16 arithmetic, so every stage reads the rows it needs through these helpers:
a block or a gathered set of rows, converted to float32 (exactly: every float16 value is a
float32 value). With float32 rows ``f32`` returns its input and ``take`` makes the one copy that
indexing by rows always makes.
"""

import numpy as np

DEFAULT_BLOCK = 65536


def f32(a: np.ndarray) -> np.ndarray:
    """``a`` as float32: itself when it is float32 already, else a converted copy."""
    return np.asarray(a, dtype=np.float32)


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a``: Numba compiles a kernel once for read-only arrays, not again for
    each caller whose rows happen to be writable."""
    view = a.view()
    view.flags.writeable = False
    return view


def take(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """float32 C-contiguous copy of the rows ``rows`` of ``x``."""
    return np.ascontiguousarray(x[rows], dtype=np.float32)


def gathered(x: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For a Numba kernel that reads the rows ``index`` (any shape; -1 for none) of float16 ``x``
    at random: (the rows it reads as float32, ``index`` renumbered into them with -1 kept, the
    ids of those rows)."""
    used, local = np.unique(index, return_inverse=True)
    local = local.reshape(index.shape).astype(index.dtype)
    if used.size and used[0] < 0:  # -1 marks no row: it stays -1, the rows shift down by one
        local -= 1
        used = used[1:]
    return take(x, used), local, used


def dot_rows(x: np.ndarray, v: np.ndarray, block: int = DEFAULT_BLOCK) -> np.ndarray:
    """float32 (n,): every row of ``x`` dotted with ``v`` (d,), one block of rows at a time."""
    v = f32(v)
    out = np.empty(x.shape[0], dtype=np.float32)
    for start in range(0, x.shape[0], block):
        out[start:start + block] = f32(x[start:start + block]) @ v
    return out


def row_sum(x: np.ndarray, block: int = DEFAULT_BLOCK) -> np.ndarray:
    """float64 (d,): the sum of the rows of ``x``, one block at a time."""
    total = np.zeros(x.shape[1], dtype=np.float64)
    for start in range(0, x.shape[0], block):
        total += f32(x[start:start + block]).sum(axis=0, dtype=np.float64)
    return total
