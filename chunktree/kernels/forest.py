"""Maximum spanning forest of a sparse graph, joining its components, and rooting the tree.

A top-K neighbour graph of real data falls apart into components (often one per topic), so the
forest alone is not a tree. ``join_components`` adds, Borůvka-style, the best edge between each
component and the components whose centroids are nearest to it — the best edge of each such pair
found by matrix products of the two member sets (exactly for small pairs; for large ones between
each side's frontier facing the other and the whole other side) — until one tree spans every vertex.
Beside those it offers spare edges (each searched row's best few into the other side), so that
the final spanning forest may join two components by more than one edge, as the best tree does.
"""

import numpy as np
import scipy.sparse
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


def max_spanning_forest(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, n: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Edge indices of a maximum spanning forest of the graph (src, dst, weight) on n vertices,
    and component labels. Equal weights are taken in edge order, so the result is deterministic."""
    order = np.argsort(-weight, kind="stable").astype(np.int64)
    return kruskal(src.astype(np.int64), dst.astype(np.int64), order, n)


# A pair of components with more member pairs than this is joined through its frontier (below).
EXACT_PAIRS = 1 << 22
# Points of each side searched against the whole other side, for a large pair.
FRONTIER = 256
# Floats in one block of a product (64 MB), and rows of the other side gathered at a time (48 MB at
# d = 384): the join never gathers a whole component, which on fuzzy data holds most of the rows.
SCRATCH = 1 << 24
COLUMN_BLOCK = 1 << 15


def _best_edges_into(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, per: int = 1
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``rows``' best ``per`` edges into ``cols``, exactly, by blocked matrix products.

    Returns ``(ids, sims)``, int64 and float32 (len(rows), per): column ids and similarities,
    descending, equal similarities to the earlier column; where ``cols`` has fewer than ``per``
    members the tail is -1 / -inf. Memory: ``COLUMN_BLOCK`` gathered columns and ``SCRATCH`` floats.
    """
    ids = np.full((rows.size, per), -1, dtype=np.int64)
    sims = np.full((rows.size, per), -np.inf, dtype=np.float32)
    for c0 in range(0, cols.size, COLUMN_BLOCK):
        block_cols = cols[c0:c0 + COLUMN_BLOCK]
        xc = x[block_cols]
        step = max(64, SCRATCH // block_cols.size)
        for r0 in range(0, rows.size, step):
            s = x[rows[r0:r0 + step]] @ xc.T
            at = np.arange(s.shape[0])
            got_ids, got_sims = [], []
            for _ in range(min(per, block_cols.size)):
                top = np.argmax(s, axis=1)  # the first of equal maxima
                got_ids.append(block_cols[top])
                got_sims.append(s[at, top].copy())
                s[at, top] = -np.inf
            both_ids = np.concatenate([ids[r0:r0 + step], np.stack(got_ids, axis=1)], axis=1)
            both_sims = np.concatenate([sims[r0:r0 + step], np.stack(got_sims, axis=1)], axis=1)
            keep = np.argsort(-both_sims, axis=1, kind="stable")[:, :per]  # ties: earlier blocks first
            ids[r0:r0 + step] = np.take_along_axis(both_ids, keep, axis=1)
            sims[r0:r0 + step] = np.take_along_axis(both_sims, keep, axis=1)
    return ids, sims


def _best_cross_edge(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[int, int, float]:
    """The most similar pair (i in a, j in b) and its similarity (the first of equal maxima, in
    the order of a, then of b)."""
    ids, sims = _best_edges_into(x, a, b)
    i = int(np.argmax(sims[:, 0]))
    return int(a[i]), int(ids[i, 0]), float(sims[i, 0])


def _nearest(x: np.ndarray, members: np.ndarray, centre: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` members most similar to ``centre`` (ties to the earlier member), in blocks."""
    scores = np.concatenate([x[members[i:i + COLUMN_BLOCK]] @ centre for i in range(0, members.size, COLUMN_BLOCK)])
    return members[np.argsort(-scores, kind="stable")[:m]]


def _cross_edge(x: np.ndarray, a: np.ndarray, b: np.ndarray, centre_a: np.ndarray, centre_b: np.ndarray
                ) -> tuple[int, int, float]:
    """The best edge between components ``a`` and ``b``: exact for a small pair; for a large one,
    the best edge between the ``FRONTIER`` points of each side nearest the other side's centre and
    all of the other side (two products of FRONTIER x size instead of one of size x size)."""
    if a.size * b.size <= EXACT_PAIRS:
        return _best_cross_edge(x, a, b)
    i, j, s = _best_cross_edge(x, _nearest(x, a, centre_b, FRONTIER), b)
    j2, i2, s2 = _best_cross_edge(x, _nearest(x, b, centre_a, FRONTIER), a)
    return (i, j, s) if s >= s2 else (i2, j2, s2)


def _pair_edges(x: np.ndarray, groups: list[np.ndarray], centres: np.ndarray, pairs: list[tuple[int, int]],
                per_row: int = 0) -> tuple[list[tuple[int, int, float]], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The best edge (i, j, similarity) of each pair of components, in the order of ``pairs``, and
    the spare edges: for every row of a small pair's smaller side, its best ``per_row`` edges into
    the larger side (src in the smaller side).

    Small pairs that share their larger component are searched together: the larger one is
    gathered (in blocks) once and multiplied with the stacked members of all its small partners
    (exact, like ``_best_cross_edge``). On fuzzy data one component often holds most rows and
    pairs with hundreds of small ones: gathering it again for each pair took 10 of the 15 s of
    joining at n = 100,000 with 5,000 topics.
    """
    best: dict[tuple[int, int], tuple[int, int, float]] = {}
    by_larger: dict[int, list[int]] = {}
    spare = [(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32))]
    for g, h in pairs:
        a, b = groups[g], groups[h]
        if a.size * b.size > EXACT_PAIRS:
            best[(g, h)] = _cross_edge(x, a, b, centres[g], centres[h])
        else:
            big, small = (g, h) if a.size >= b.size else (h, g)
            by_larger.setdefault(big, []).append(small)
    for big, smalls in by_larger.items():
        rows = np.concatenate([groups[s] for s in smalls])
        owner = np.repeat(np.arange(len(smalls)), [groups[s].size for s in smalls])
        ids, sims = _best_edges_into(x, rows, groups[big], max(per_row, 1))
        if per_row:
            found = np.isfinite(sims[:, :per_row])  # a larger side of fewer rows offers fewer edges
            spare.append((np.repeat(rows, per_row).reshape(-1, per_row)[found], ids[:, :per_row][found],
                          sims[:, :per_row][found]))
        for k, small in enumerate(smalls):
            mine = np.flatnonzero(owner == k)
            top = mine[np.argmax(sims[mine, 0])]  # the first of equal maxima, as _best_cross_edge takes
            i, j, v = int(rows[top]), int(ids[top, 0]), float(sims[top, 0])
            best[(min(big, small), max(big, small))] = (i, j, v) if big > small else (j, i, v)
    spare_edges = tuple(np.concatenate([part[c] for part in spare]) for c in range(3))
    return [best[pair] for pair in pairs], spare_edges


def join_components(x: np.ndarray, labels: np.ndarray, candidates: int = 3, per_row: int = 0
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges (src, dst, weight) that join the components given by ``labels`` into one tree, then
    ``per_row`` spare edges for each row of the smaller side of every small pair searched.

    Each round, every component is paired with the ``candidates`` components whose mean vectors
    are most similar to its own; the best edge of each pair is found by ``_cross_edge`` (exact
    for small pairs, through the frontier facing the other component for large ones), and
    Kruskal over those edges merges components. Every component gains an edge each round, so the
    number of components at least halves per round.

    The first edges returned (one fewer than the components) join the components into one tree.
    The spare edges after them are each searched row's best ``per_row`` edges into the component
    it was searched against: the best tree may join two components by more than one edge, and a
    maximum spanning forest of the components' own edges and all of these is one spanning tree,
    never lighter than the one the joining edges alone give.
    """
    src_all, dst_all, w_all = [], [], []
    spare_all: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    labels = labels.copy()
    while True:
        comps, inverse = np.unique(labels, return_inverse=True)
        c = comps.size
        if c <= 1:
            break
        members = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[members], np.arange(c + 1))
        groups = [members[bounds[g]:bounds[g + 1]] for g in range(c)]
        # Sums per component as one sparse (c x n) product: np.add.at took two thirds of the joining
        # time at n = 100k, and gathering the rows by component would copy the vectors.
        indicator = scipy.sparse.csr_matrix((np.ones(x.shape[0], x.dtype), (inverse, np.arange(x.shape[0]))),
                                            shape=(c, x.shape[0]))
        centroids = np.asarray(indicator @ x, dtype=np.float64)
        centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
        csim = centroids @ centroids.T
        np.fill_diagonal(csim, -np.inf)
        m = min(candidates, c - 1)
        near = np.argsort(-csim, axis=1, kind="stable")[:, :m]
        pairs = {(min(g, h), max(g, h)) for g in range(c) for h in near[g].tolist()}
        centres = centroids.astype(x.dtype)
        edges, spare = _pair_edges(x, groups, centres, sorted(pairs), per_row)
        spare_all.append(spare)
        e_src = np.array([e[0] for e in edges], dtype=np.int64)
        e_dst = np.array([e[1] for e in edges], dtype=np.int64)
        e_w = np.array([e[2] for e in edges], dtype=np.float32)
        taken, _ = max_spanning_forest(inverse[e_src], inverse[e_dst], e_w, c)
        src_all.append(e_src[taken])
        dst_all.append(e_dst[taken])
        w_all.append(e_w[taken])
        # Relabel: merge the components joined this round.
        _, merged = kruskal(inverse[e_src[taken]], inverse[e_dst[taken]], np.arange(taken.size, dtype=np.int64), c)
        labels = merged[inverse]
    if not src_all:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32)
    return (np.concatenate(src_all + [s[0] for s in spare_all]), np.concatenate(dst_all + [s[1] for s in spare_all]),
            np.concatenate(w_all + [s[2] for s in spare_all]))


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
