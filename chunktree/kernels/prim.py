"""Prim's maximum spanning tree on a dense similarity matrix, O(n^2) time, O(n) extra memory.

Growing the tree from ``root`` gives the parent pointers of the tree rooted there directly.
The vertices not yet in the tree are kept in a compacted array, so step t scans n - t of them:
n^2 / 2 reads of the matrix in all, each row read once, sequentially.
"""

import numpy as np
from numba import njit


@njit("Tuple((int64[:], float32[:]))(float32[:, ::1], int64)", cache=True, nogil=True)
def prim_max_spanning_tree(sim, root):  # pragma: no cover - compiled
    """Maximum spanning tree of the complete graph whose weights are ``sim``.

    Parameters
    ----------
    sim : float32 (n, n), C-contiguous, symmetric; the diagonal is ignored.
    root : int64 in [0, n).

    Returns
    -------
    parent : int64 (n,); parent[root] == -1.
    weight : float32 (n,); sim[i, parent[i]], 0 for the root.
    Ties go to the lower vertex index, so the result is deterministic.
    """
    n = sim.shape[0]
    parent = np.full(n, -1, dtype=np.int64)
    weight = np.zeros(n, dtype=np.float32)
    best = np.full(n, -np.inf, dtype=np.float32)
    remaining = np.empty(n - 1, dtype=np.int64)
    k = 0
    for v in range(n):
        if v != root:
            remaining[k] = v
            k += 1
    m = n - 1
    v = root
    while m > 0:
        row = sim[v]
        arg = -1
        top = -np.inf
        for t in range(m):
            u = remaining[t]
            s = row[u]
            if s > best[u]:
                best[u] = s
                parent[u] = v
            b = best[u]
            if arg < 0 or b > top or (b == top and u < remaining[arg]):
                top = b
                arg = t
        v = remaining[arg]
        weight[v] = best[v]
        m -= 1
        remaining[arg] = remaining[m]
    return parent, weight
