"""Maximum spanning forest of a sparse graph (Kruskal over edges sorted once) and rooting the tree."""

import numpy as np
from numba import njit


@njit(cache=True)
def _find(uf, i):  # pragma: no cover - compiled
    while uf[i] != i:
        uf[i] = uf[uf[i]]
        i = uf[i]
    return i


@njit("Tuple((int64[:], int64[:]))(int64[:], int64[:], int64[:], int64)", cache=True)
def kruskal(src, dst, order, n):  # pragma: no cover - compiled
    """Kruskal's algorithm over edges taken in ``order`` (heaviest first).

    Returns the indices (into src/dst) of the forest's edges, and each vertex's component label
    (the smallest vertex id of its component).
    """
    uf = np.arange(n)
    taken = np.empty(max(n - 1, 0), dtype=np.int64)
    m = 0
    for e in order:
        if m == n - 1:
            break
        a, b = _find(uf, src[e]), _find(uf, dst[e])
        if a != b:
            if a < b:
                uf[b] = a
            else:
                uf[a] = b
            taken[m] = e
            m += 1
    labels = np.empty(n, dtype=np.int64)
    for i in range(n):
        labels[i] = _find(uf, i)
    return taken[:m], labels


def descending_keys(weight: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
    """uint64 keys of float32 ``weight`` (no NaN) that sort ascending as the weights sort
    descending, equal weights by ``index`` (below 2^32, broadcast against ``weight``; by default
    the position along the last axis): the weight's bits, turned to sort as unsigned integers,
    above the index. Made in place, in 12 bytes a weight at most."""
    negated = np.negative(weight)
    negated += np.float32(0.0)  # -0.0 becomes 0.0, equal to it
    bits = negated.view(np.uint32)
    del negated
    order = bits >> np.uint32(31)  # negative (sign set): all bits flipped; else the sign bit set
    order *= np.uint32(0x7FFFFFFF)
    order |= np.uint32(0x80000000)
    order ^= bits
    del bits
    keys = order.astype(np.uint64)
    del order
    keys <<= np.uint64(32)
    if index is None:
        index = np.arange(weight.shape[-1], dtype=np.uint32)
    np.bitwise_or(keys, index if index.dtype.kind == "u" else index.astype(np.uint64), out=keys)
    return keys


def descending(weight: np.ndarray) -> np.ndarray:
    """Indices that sort ``weight`` (no NaN) in descending order, equal weights in index order: a
    stable argsort of ``-weight``. For float32 (similarities) it is one sort of 64-bit keys
    (``descending_keys``), which numpy's vectorised sort takes, faster than the stable argsort and
    with no more memory: the keys become the indices in place."""
    if weight.dtype != np.float32 or weight.size >= 1 << 32:
        return np.argsort(-weight, kind="stable").astype(np.int64, copy=False)
    keys = descending_keys(weight)
    keys.sort()
    keys &= np.uint64(0xFFFFFFFF)
    return keys.view(np.int64)


def max_spanning_forest(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, n: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Edge indices of a maximum spanning forest of the graph (src, dst, weight) on n vertices,
    and component labels. Equal weights are taken in edge order, so the result is deterministic."""
    order = descending(weight)
    # No copies of int64 edges: each would add 8 bytes an edge to the peak.
    return kruskal(src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False), order, n)


@njit("Tuple((int64[:], float32[:]))(int64[:], int64[:], float32[:], int64, int64)", cache=True)
def orient_tree(src, dst, weight, n, root):  # pragma: no cover - compiled
    """Parent pointers of the spanning tree given as n - 1 undirected edges, rooted at ``root``.

    Returns parent int64 (n,) with parent[root] = -1 and weight float32 (n,), the weight of each
    vertex's edge to its parent (0 for the root).
    """
    degree = np.zeros(n + 1, dtype=np.int64)
    for e in range(src.shape[0]):
        degree[src[e] + 1] += 1
        degree[dst[e] + 1] += 1
    indptr = np.cumsum(degree)
    fill = indptr[:-1].copy()
    adj = np.empty(2 * src.shape[0], dtype=np.int64)
    adj_w = np.empty(2 * src.shape[0], dtype=np.float32)
    for e in range(src.shape[0]):
        a, b = src[e], dst[e]
        adj[fill[a]] = b
        adj_w[fill[a]] = weight[e]
        fill[a] += 1
        adj[fill[b]] = a
        adj_w[fill[b]] = weight[e]
        fill[b] += 1
    parent = np.full(n, -2, dtype=np.int64)
    pw = np.zeros(n, dtype=np.float32)
    parent[root] = -1
    queue = np.empty(n, dtype=np.int64)
    queue[0] = root
    head, tail = 0, 1
    while head < tail:
        v = queue[head]
        head += 1
        for j in range(indptr[v], indptr[v + 1]):
            u = adj[j]
            if parent[u] == -2:
                parent[u] = v
                pw[u] = adj_w[j]
                queue[tail] = u
                tail += 1
    return parent, pw
