"""Row-wise top-K neighbours by cosine, computed in blocks through BLAS, never as an n x n matrix.

``topk_exact`` compares every row with every other row (O(n^2 d) time, O(block * n) memory).
``topk_clustered`` compares each row only with the rows of the ``probes`` clusters whose centres
are nearest to its own cluster's centre (an inverted-file search done as one matrix product per
cluster), so its cost is O(n * probes * n / n_clusters * d). Both exclude a row from its own list.
"""

import numpy as np

DEFAULT_BLOCK = 1024


def _select(sims: np.ndarray, cand: np.ndarray, k: int, gather: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Top-k columns of each row of ``sims`` (descending; ties to the lower candidate id).

    ``cand`` maps columns to ids: one id per column (1-D), or per row and column (2-D, ``gather``).
    """
    if sims.shape[1] > k:
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(sims.shape[1]), sims.shape).copy()
    vals = np.take_along_axis(sims, part, axis=1)
    ids = np.take_along_axis(cand, part, axis=1) if gather else cand[part]
    order = np.lexsort((ids, -vals), axis=1)
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(vals, order, axis=1)


def topk_exact(x: np.ndarray, k: int, block: int = DEFAULT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` neighbours of every row of float32 unit rows ``x`` (n, d), k < n.

    Returns ids int64 (n, k) and similarities float32 (n, k), each row in descending similarity.
    """
    n = x.shape[0]
    ids = np.empty((n, k), dtype=np.int64)
    sims = np.empty((n, k), dtype=np.float32)
    everyone = np.arange(n, dtype=np.int64)
    for start in range(0, n, block):
        stop = min(start + block, n)
        s = x[start:stop] @ x.T
        s[np.arange(stop - start), np.arange(start, stop)] = -np.inf  # not its own neighbour
        ids[start:stop], sims[start:stop] = _select(s, everyone, k)
    return ids, sims


def topk_clustered(x: np.ndarray, k: int, centers: np.ndarray, probes: int,
                   block: int = DEFAULT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Approximate top-``k`` neighbours by an inverted-file search done as matrix products.

    Every row belongs to the cluster of its nearest centre and searches the clusters of its
    ``probes`` nearest centres. The work is grouped by cluster: the rows probing a cluster are
    multiplied with that cluster's members in one product, and the best ``k`` are merged into
    each row's running list.

    Parameters
    ----------
    x : float32 (n, d), C-contiguous unit rows.
    centers : float32 (c, d) cluster centres (e.g. K-means on a sample of ``x``).
    probes : clusters searched per row, in [1, c].

    Returns ids int64 (n, k) and similarities float32 (n, k), descending; where fewer than k
    candidates were seen, the tail holds id -1 and similarity -inf.
    """
    n, c = x.shape[0], centers.shape[0]
    probed = np.empty((n, probes), dtype=np.int64)
    step = block * 8
    for start in range(0, n, step):
        s = x[start:start + step] @ centers.T
        top = np.argpartition(-s, probes - 1, axis=1)[:, :probes] if probes < c else np.tile(np.arange(c), (len(s), 1))
        # Nearest centre first: it is the row's own cluster.
        nearest_first = np.argsort(-np.take_along_axis(s, top, axis=1), axis=1, kind="stable")
        probed[start:start + step] = np.take_along_axis(top, nearest_first, axis=1)
    labels = probed[:, 0]
    members = np.argsort(labels, kind="stable")  # ascending row ids within each cluster
    member_bounds = np.searchsorted(labels[members], np.arange(c + 1))
    pairs_cluster = probed.ravel()
    pairs_row = np.repeat(np.arange(n, dtype=np.int64), probes)
    by_probe = np.argsort(pairs_cluster, kind="stable")
    askers = pairs_row[by_probe]
    asker_bounds = np.searchsorted(pairs_cluster[by_probe], np.arange(c + 1))

    ids = np.full((n, k), -1, dtype=np.int64)
    sims = np.full((n, k), -np.inf, dtype=np.float32)
    for cl in range(c):
        cand = members[member_bounds[cl]:member_bounds[cl + 1]]
        if cand.size == 0:
            continue
        xc = x[cand]
        rows_all = askers[asker_bounds[cl]:asker_bounds[cl + 1]]
        for start in range(0, rows_all.size, block):
            rows = rows_all[start:start + block]
            s = x[rows] @ xc.T
            own = np.flatnonzero(labels[rows] == cl)  # a row is not its own neighbour
            s[own, np.searchsorted(cand, rows[own])] = -np.inf
            new_ids, new_sims = _select(s, cand, min(k, cand.size))
            merged_ids = np.concatenate([ids[rows], new_ids], axis=1)
            merged_sims = np.concatenate([sims[rows], new_sims], axis=1)
            best_ids, best_sims = _select(merged_sims, merged_ids, k, gather=True)
            ids[rows], sims[rows] = best_ids, best_sims
    ids[~np.isfinite(sims)] = -1
    return ids, sims
