"""Prim's maximum spanning tree on a dense similarity matrix, O(n^2) time, O(n) extra memory.

Growing the tree from ``root`` gives the parent pointers of the tree rooted there directly.
The vertices not yet in the tree are kept in ascending order in a compacted array: each step
scans them once, drops the vertex added by the previous step as it goes, and reads the current
row in increasing column order (n^2 / 2 reads in all, prefetch-friendly).
"""

import numpy as np
from numba import njit


@njit("Tuple((int64[:], float32[:]))(float32[:, ::1], int64)", cache=True, nogil=True)
def prim_max_spanning_tree(sim, root):  # pragma: no cover - compiled
    """Maximum spanning tree of the complete graph whose weights are ``sim``.

    Parameters
    ----------
    sim
        float32 (n, n), C-contiguous, symmetric; the diagonal is ignored.
    root
        int64 in [0, n).

    Returns
    -------
    parent
        int64 (n,); parent[root] == -1.
    weight
        float32 (n,); sim[i, parent[i]], 0 for the root.
    Ties go to the lower vertex index for the next vertex, and to the vertex that joined the tree
    first for a parent, so the result is deterministic.
    """
    n = sim.shape[0]
    parent = np.full(n, -1, dtype=np.int64)
    weight = np.zeros(n, dtype=np.float32)
    best = np.full(n, -np.inf, dtype=np.float32)
    remaining = np.arange(n)
    m = n
    v = root
    for _ in range(n - 1):
        row = sim[v]
        top = -np.inf
        arg = -1
        kept = 0
        for t in range(m):
            u = remaining[t]
            if u == v:  # added to the tree by the previous step
                continue
            remaining[kept] = u
            kept += 1
            b = best[u]
            s = row[u]
            if s > b:
                best[u] = s
                parent[u] = v
                b = s
            if b > top:
                top = b
                arg = u
        m = kept
        weight[arg] = top
        v = arg
    return parent, weight
