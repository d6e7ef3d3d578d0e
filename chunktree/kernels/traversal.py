"""Breadth-first and depth-first orders of a rooted tree given as children lists (CSR)."""

import numpy as np
from numba import njit


def children_csr(parent: np.ndarray, *keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Children of every vertex as CSR arrays, each list sorted by ``keys`` (most significant first,
    ascending), then by vertex index.

    Returns ``indptr`` int64 (n + 1,) and ``children`` int64 (n - roots,): the children of v are
    ``children[indptr[v]:indptr[v + 1]]``.
    """
    n = parent.shape[0]
    vertices = np.flatnonzero(parent >= 0)
    # lexsort: the last key is the primary one.
    sort_keys = [vertices] + [k[vertices] for k in reversed(keys)] + [parent[vertices]]
    children = vertices[np.lexsort(sort_keys)].astype(np.int64)
    counts = np.bincount(parent[vertices], minlength=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, children


@njit("int64[:](int64[:], int64[:], int64)", cache=True)
def bfs_order(indptr, children, root):  # pragma: no cover - compiled
    """Vertices reachable from ``root`` in breadth-first order, children in their CSR order."""
    n = indptr.shape[0] - 1
    order = np.empty(n, dtype=np.int64)
    order[0] = root
    head, tail = 0, 1
    while head < tail:
        v = order[head]
        head += 1
        for j in range(indptr[v], indptr[v + 1]):
            order[tail] = children[j]
            tail += 1
    return order[:tail]


@njit("int64[:](int64[:], int64[:], int64)", cache=True)
def dfs_order(indptr, children, root):  # pragma: no cover - compiled
    """Vertices reachable from ``root`` in depth-first preorder, children in their CSR order."""
    n = indptr.shape[0] - 1
    order = np.empty(n, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    stack[0] = root
    top, count = 1, 0
    while top > 0:
        top -= 1
        v = stack[top]
        order[count] = v
        count += 1
        # Push in reverse so the first child is visited first.
        for j in range(indptr[v + 1] - 1, indptr[v] - 1, -1):
            stack[top] = children[j]
            top += 1
    return order[:count]
