"""Orders of a rooted tree given as children lists (CSR): breadth-first, depth-first, best-first
by a priority, a ranking with each vertex's tree neighbours pulled in after it, and runs (a
ranking in which a tree edge to what was read can lift a vertex ahead)."""

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


@njit(cache=True)
def _heap_push(keys, vertices, size, key, v):  # pragma: no cover - compiled
    """Push (key, v) onto the binary heap held in ``keys[:size]``, ``vertices[:size]``; its top
    is the highest key, ties to the lower vertex. Returns the new size."""
    i = size
    while i > 0:
        p = (i - 1) // 2
        if key > keys[p] or (key == keys[p] and v < vertices[p]):
            keys[i], vertices[i] = keys[p], vertices[p]
            i = p
        else:
            break
    keys[i], vertices[i] = key, v
    return size + 1


@njit(cache=True)
def _heap_pop(keys, vertices, size):  # pragma: no cover - compiled
    """Take the top of the heap: (its key, its vertex, the new size)."""
    top_key, top = keys[0], vertices[0]
    size -= 1
    key, last = keys[size], vertices[size]
    i = 0
    while True:  # sift the last element down from the top
        a = 2 * i + 1
        if a >= size:
            break
        b = a + 1
        if b < size and (keys[b] > keys[a] or (keys[b] == keys[a] and vertices[b] < vertices[a])):
            a = b
        if keys[a] > key or (keys[a] == key and vertices[a] < last):
            keys[i], vertices[i] = keys[a], vertices[a]
            i = a
        else:
            break
    keys[i], vertices[i] = key, last
    return top_key, top, size


@njit("int64[:](int64[:], int64[:], int64, float64[:])", cache=True)
def best_first_order(indptr, children, root, priority):  # pragma: no cover - compiled
    """Vertices reachable from ``root``, each step taking the frontier vertex (a child of one
    already taken) of highest ``priority``; ties to the lower index. A binary heap: O(n log n)."""
    n = indptr.shape[0] - 1
    order = np.empty(n, dtype=np.int64)
    keys = np.empty(n, dtype=np.float64)
    vertices = np.empty(n, dtype=np.int64)
    size, count, v = 0, 0, root
    while True:
        order[count] = v
        count += 1
        for j in range(indptr[v], indptr[v + 1]):
            size = _heap_push(keys, vertices, size, priority[children[j]], children[j])
        if size == 0:
            break
        _, v, size = _heap_pop(keys, vertices, size)
    return order[:count]


@njit("int64[:](int64[:], int64[:], int64[:], float64[:], float64[:])", cache=True)
def runs_order(indptr, children, parent, chunk_key, edge_key):  # pragma: no cover - compiled
    """Every vertex, each step taking the unread one of highest key: its own ``chunk_key``, or
    ``edge_key[e]`` of a tree edge ``e`` to a vertex already read when that is higher
    (``edge_key[c]`` is the key of the edge from ``c`` to its parent). Ties to the lower index.
    A binary heap with lazy updates: O(n log n)."""
    n = parent.shape[0]
    key = chunk_key.copy()
    keys = np.empty(2 * n, dtype=np.float64)  # n vertices, and at most one raise per edge
    vertices = np.empty(2 * n, dtype=np.int64)
    size = 0
    for v in range(n):
        size = _heap_push(keys, vertices, size, key[v], v)
    read = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    count = 0
    while size > 0:
        k, v, size = _heap_pop(keys, vertices, size)
        if read[v] or k != key[v]:  # read already, or a key since raised
            continue
        read[v] = True
        order[count] = v
        count += 1
        p = parent[v]
        if p >= 0 and not read[p] and edge_key[v] > key[p]:
            key[p] = edge_key[v]
            size = _heap_push(keys, vertices, size, key[p], p)
        for j in range(indptr[v], indptr[v + 1]):
            c = children[j]
            if not read[c] and edge_key[c] > key[c]:
                key[c] = edge_key[c]
                size = _heap_push(keys, vertices, size, key[c], c)
    return order


@njit("int64[:](int64[:], int64[:], int64[:], float32[:], int64[:])", cache=True)
def pull_neighbours_order(indptr, children, parent, weight, ranking):  # pragma: no cover - compiled
    """Vertices in ``ranking`` order, each followed at once by its tree neighbours (parent and
    children) not placed yet, by descending edge weight (``weight[c]`` is the weight of the edge
    from ``c`` to its parent; ties to the lower index)."""
    n = ranking.shape[0]
    placed = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    count = 0
    for r in range(n):
        v = ranking[r]
        if placed[v]:
            continue
        placed[v] = True
        order[count] = v
        count += 1
        m = indptr[v + 1] - indptr[v] + 1
        near = np.empty(m, dtype=np.int64)
        near_w = np.empty(m, dtype=np.float64)
        k = 0
        if parent[v] >= 0 and not placed[parent[v]]:
            near[k], near_w[k] = parent[v], weight[v]
            k += 1
        for j in range(indptr[v], indptr[v + 1]):
            c = children[j]
            if not placed[c]:
                near[k], near_w[k] = c, weight[c]
                k += 1
        for a in range(1, k):  # insertion sort: descending weight, then ascending index
            u, w = near[a], near_w[a]
            b = a - 1
            while b >= 0 and (near_w[b] < w or (near_w[b] == w and near[b] > u)):
                near[b + 1], near_w[b + 1] = near[b], near_w[b]
                b -= 1
            near[b + 1], near_w[b + 1] = u, w
        for a in range(k):
            placed[near[a]] = True
            order[count] = near[a]
            count += 1
    return order
