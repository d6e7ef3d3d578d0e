"""Row-wise top-K neighbours by cosine, computed in blocks through BLAS, never as an n x n matrix.

``topk_exact`` compares every row with every other row (O(n^2 d) time, O(block * n) memory).
``topk_clustered`` compares each row only with the rows of the ``probes`` clusters whose centres
are nearest to it (an inverted-file search done as one matrix product per cluster and block of
rows), so its cost is O(n * probes * n / n_clusters * d). Both exclude a row from its own list.
"""

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import overload
from threadpoolctl import threadpool_limits

from chunktree.kernels import bf16 as bf16_units
from chunktree.kernels.rows import f32, readonly, take

DEFAULT_BLOCK = 1024
# Rows searched together by ``search_rows``: one task of the Ray path. A block gathers (and reads
# as float32) the members of nearly every cluster its rows probe, so blocks are few: at most
# ROW_BLOCKS of them, of at least ROW_BLOCK rows (``row_block_size``); every block gathers the
# clusters' members again (bench/bench_order_10m.py). The partition depends on n alone, so the
# single-process and Ray paths do the same products and give the same lists.
ROW_BLOCK = 131_072
ROW_BLOCKS = 8
# Rows whose probe lists are found together (``probe_lists``), with float32 and with bf16 products.
# Smaller blocks keep a bf16 product's output in cache (bench/bench_products.py).
PROBE_BLOCK = 8192
PROBE_BLOCK_BF16 = 1024
# Graph rows whose pairs are scored together by a refinement pass (22 MB of pairs at 24 entries a row).
REFINE_BLOCK = 2048


def _select(sims: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k columns of each row of ``sims`` (descending; ties to the lower candidate id);
    ``cand`` maps columns to ids."""
    if sims.shape[1] > k:
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(sims.shape[1]), sims.shape).copy()
    vals = np.take_along_axis(sims, part, axis=1)
    ids = cand[part]
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


def topk_clustered(x: np.ndarray, k: int, centers: np.ndarray, probes: int, gap: float | None = None,
                   block: int = DEFAULT_BLOCK, row_block: int | None = None, bar: "Blocks | None" = None,
                   bf16: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Approximate top-``k`` neighbours by an inverted-file search done as matrix products.

    Every row belongs to the cluster of its nearest centre and searches the clusters of its
    ``probes`` nearest centres (``probe_lists``), less those more than ``gap`` below the nearest
    in similarity. Rows are then searched in blocks of ``row_block`` (default
    ``row_block_size(n)``; ``search_rows``); within a block the work is grouped by cluster: the
    block's rows probing a cluster are multiplied with that cluster's members in one product, and
    a Numba kernel keeps each row's best ``k``. The blocks are independent: the Ray path
    (``chunktree.engine.distributed``) runs the same blocks as tasks and gets the same lists.

    Parameters
    ----------
    x
        float32 or float16 (n, d), C-contiguous unit rows (read as float32 a block at a time).
    centers
        float32 (c, d) cluster centres (e.g. K-means on a sample of ``x``).
    probes
        clusters searched per row at most, in [1, c].
    gap
        leave out a probed cluster whose centre's similarity to the row is more than this below
        the nearest centre's (default: none left out).
    bar
        optional progress (``Blocks``): ``probed(rows)`` after each block of rows has its probe
        lists, ``searched(rows)`` after each block is searched.
    bf16
        multiply on the CPU's bf16 units (``kernels.bf16``; where ``bf16.available()``); the
        probe lists and the lists keep float32 values, recomputed where bf16 rounding could
        decide.

    Returns ids int64 (n, k) and similarities float32 (n, k), descending, ties to the lower id;
    where fewer than k candidates were seen, the tail holds id -1 and similarity -inf.
    """
    n = x.shape[0]
    row_block = row_block or row_block_size(n)
    bar = bar or Blocks()
    probed = np.empty((n, probes), dtype=probe_dtype(centers.shape[0]))
    for start in range(0, n, row_block):
        probed[start:start + row_block] = probe_lists(x[start:start + row_block], centers, probes, gap, bf16=bf16)
        bar.probed(min(row_block, n - start))
    clusters = ClusterIndex.build(probed[:, 0], centers.shape[0])
    ids = np.empty((n, k), dtype=np.int64)
    sims = np.empty((n, k), dtype=np.float32)
    for start in range(0, n, row_block):
        stop = min(start + row_block, n)
        ids[start:stop], sims[start:stop] = search_rows(x, np.arange(start, stop), probed[start:stop], clusters, k,
                                                        block, bf16=bf16)
        bar.searched(stop - start)
    return ids, sims


def row_block_size(n: int) -> int:
    """The rows of one block of the search (see ``ROW_BLOCKS``)."""
    return max(ROW_BLOCK, -(-n // ROW_BLOCKS))


class Blocks:
    """Where ``topk_clustered`` reports its blocks of rows; this one does nothing with them.
    ``at_once`` is how many blocks are searched at the same time (Ray tasks; 1 in one process)."""

    at_once = 1

    def probed(self, rows: int) -> None:
        """``rows`` more rows have their probe lists."""

    def searched(self, rows: int) -> None:
        """``rows`` more rows are searched."""


def probe_dtype(n_clusters: int) -> np.dtype:
    """The probe lists' integer type: uint16 while the clusters' ids and the mark of a left-out
    probe (``n_clusters``) fit, a quarter of int64's memory."""
    return np.dtype(np.uint16 if n_clusters < 2**16 else np.int32)


def probe_lists(x: np.ndarray, centers: np.ndarray, probes: int, gap: float | None = None,
                threads: int | None = None, bf16: bool = False) -> np.ndarray:
    """(n, probes) of ``probe_dtype``: the ``probes`` centres nearest each row, nearest (its own
    cluster) first, ties to the lower centre; a centre more than ``gap`` below the nearest in
    similarity is left out, its place holding ``c`` (one past the last centre).

    Blocks of rows are shared out among ``threads`` Python threads (default Numba's, the cores),
    each multiplying on one BLAS thread and selecting with ``_nearest_first``, as in
    ``search_rows``: a parallel selection between BLAS products competes with BLAS's spinning
    threads (bench/bench_products.py). With ``bf16``, the
    products run on the bf16 units and a centre within ``bf16.margin`` of a row's last probe is
    compared again in float32 (``kernels.bf16``)."""
    c = centers.shape[0]
    out = np.empty((x.shape[0], probes), dtype=probe_dtype(c))
    step = PROBE_BLOCK_BF16 if bf16 else PROBE_BLOCK
    floor = np.float32(np.inf if gap is None else gap)
    centers = readonly(np.ascontiguousarray(centers, dtype=np.float32))
    centers_bf16 = bf16_units.to_bf16(centers) if bf16 else None
    slack = np.float32(bf16_units.margin(x.shape[1]) if bf16 else 0.0)

    def block(start: int) -> None:
        xa = readonly(f32(x[start:start + step]))
        _nearest_first(_product(xa, centers, centers_bf16), floor, c, out[start:start + step], xa, centers, slack)

    threads = numba.get_num_threads() if threads is None else threads
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        list(pool.map(block, range(0, x.shape[0], step)))
    return out


def _product(xa: np.ndarray, xb: np.ndarray, xb_bf16: np.ndarray | None) -> np.ndarray:
    """float32 ``xa @ xb.T``: through BLAS, or on the bf16 units when ``xb_bf16`` (``xb``'s rows
    as ``bf16.to_bf16`` gives them) is given."""
    if xb_bf16 is None:
        return xa @ xb.T
    return bf16_units.products(bf16_units.to_bf16(xa), xb_bf16, xa.shape[0], xb.shape[0])


@njit(cache=True, nogil=True)
def _nearest_first(s, gap, left_out, out, xa, centers, slack):  # pragma: no cover - compiled
    """Each row's ``out.shape[1]`` largest columns of ``s`` (``xa @ centers.T``), largest first,
    ties to the lower column, those more than ``gap`` below the largest replaced by ``left_out``:
    one pass of insertions a row, which costs a fraction of the product (numpy's argpartition and
    argsort cost more than the product itself). With ``slack`` > 0 (bf16 products, off by at most ``slack``), a column that comes
    within ``slack`` of the last kept is computed again in float32 and that value is used."""
    p = out.shape[1]
    for i in range(s.shape[0]):
        vals = np.full(p, -np.inf, dtype=np.float32)
        ids = np.zeros(p, dtype=np.int64)
        row = s[i]
        for j in range(row.size):
            v = row[j]
            if v <= vals[p - 1] - slack:
                continue
            if slack > 0:
                v = bf16_units.dot(xa[i], centers[j])
                if v <= vals[p - 1]:
                    continue
            pos = p - 1
            while pos > 0 and v > vals[pos - 1]:
                vals[pos] = vals[pos - 1]
                ids[pos] = ids[pos - 1]
                pos -= 1
            vals[pos] = v
            ids[pos] = j
        for t in range(p):
            out[i, t] = ids[t] if vals[0] - vals[t] <= gap else left_out


@dataclass(frozen=True)
class ClusterIndex:
    """The inverted file: ``members[bounds[c]:bounds[c + 1]]`` are cluster c's rows, ascending."""

    members: np.ndarray
    bounds: np.ndarray

    @classmethod
    def build(cls, labels: np.ndarray, n_clusters: int) -> "ClusterIndex":
        """From each row's cluster label."""
        members = np.argsort(labels, kind="stable")
        return cls(members, np.searchsorted(labels[members], np.arange(n_clusters + 1)))


def search_rows(x: np.ndarray, rows: np.ndarray, probed: np.ndarray, clusters: ClusterIndex, k: int,
                block: int = DEFAULT_BLOCK, threads: int | None = None, bf16: bool = False
                ) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` lists of the rows ``rows`` (int64 ids) of ``x``, each searching the clusters in
    its row of ``probed``; see ``topk_clustered``.

    The clusters are shared out among ``threads`` Python threads (default Numba's, the cores),
    in parts of equal work, each thread with one BLAS thread and lists of its own, merged at the
    end: the products and the merge release the GIL, so every core multiplies and merges, where a
    parallel merge would fight BLAS's spinning threads (see ``_keep_best``). The products are
    the same as on one thread, and a list is the best ``k`` of the candidates by a total order
    (similarity, then id), so the lists do not depend on ``threads`` (tested bit for bit).
    With ``bf16``, the products run on the bf16 units and a product within ``bf16.margin`` of a
    list's k-th best is computed again in float32 (``kernels.bf16``). bench/bench_topk.py times
    the search against faiss.
    """
    m, probes = probed.shape
    pairs_cluster = probed.ravel()
    by_probe = np.argsort(pairs_cluster, kind="stable")
    askers = (by_probe // probes).astype(np.int64)  # local row of each (row, probe) pair, grouped by cluster
    asker_bounds = np.searchsorted(pairs_cluster[by_probe], np.arange(clusters.bounds.size))
    asked = np.flatnonzero(np.diff(asker_bounds) * np.diff(clusters.bounds))
    threads = max(1, min(numba.get_num_threads() if threads is None else threads, asked.size))
    slack = np.float32(bf16_units.margin(x.shape[1]) if bf16 else 0.0)

    def search(part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.full((m, k), -1, dtype=np.int64)
        sims = np.full((m, k), -np.inf, dtype=np.float32)
        for cl in part:
            cand = clusters.members[clusters.bounds[cl]:clusters.bounds[cl + 1]]
            xc = take(x, cand)
            xc_bf16 = bf16_units.to_bf16(xc) if bf16 else None
            local_all = askers[asker_bounds[cl]:asker_bounds[cl + 1]]
            for at in range(0, local_all.size, block):
                local = local_all[at:at + block]
                xa = take(x, rows[local])
                _keep_best(_product(xa, xc, xc_bf16), xa, xc, slack, local, rows, cand, ids, sims)
        return ids, sims

    if threads == 1:
        return search(asked)
    work = np.cumsum(np.diff(asker_bounds)[asked] * np.diff(clusters.bounds)[asked].astype(np.float64))
    parts = np.split(asked, np.searchsorted(work, work[-1] * np.arange(1, threads) / threads))
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        found = list(pool.map(search, parts))
    ids, sims = found[0]
    for more_ids, more_sims in found[1:]:
        _merge_lists(ids, sims, more_ids, more_sims)
    return ids, sims


@njit(parallel=True, cache=True)
def _merge_lists(ids, sims, more_ids, more_sims):  # pragma: no cover - compiled
    """Each row of (ids, sims) becomes the best k of its own and ``more``'s entries, by
    similarity, then the lower id (-1 / -inf tails last)."""
    k = ids.shape[1]
    for r in prange(ids.shape[0]):
        a_ids, a_sims = ids[r].copy(), sims[r].copy()
        i = j = 0
        for out in range(k):
            take_a = j >= k or (i < k and (a_sims[i] > more_sims[r, j] or (
                a_sims[i] == more_sims[r, j] and (more_ids[r, j] < 0 or 0 <= a_ids[i] < more_ids[r, j]))))
            if take_a:
                ids[r, out], sims[r, out] = a_ids[i], a_sims[i]
                i += 1
            else:
                ids[r, out], sims[r, out] = more_ids[r, j], more_sims[r, j]
                j += 1


@njit(cache=True, nogil=True)
def _keep_best(s, xa, xc, slack, local, rows, cand, ids, sims):  # pragma: no cover - compiled
    """Merge similarities ``s`` (``xa @ xc.T``, local x cand) into the sorted best lists (ids,
    sims) of the rows ``local`` (``rows[local]`` are their ids): descending similarity, ties to
    the lower id; a row is never its own neighbour. With ``slack`` > 0 (bf16 products, off by at
    most ``slack``), a product that comes within ``slack`` of a list's k-th best is computed
    again in float32 and that value is kept.

    Serial on purpose: between two products OpenBLAS's threads spin, and a parallel kernel
    would fight them. ``search_rows`` runs it in several threads instead, each on lists of its own.
    """
    k = ids.shape[1]
    for i in range(local.size):
        r = local[i]
        me = rows[r]
        row_ids, row_sims, row = ids[r], sims[r], s[i]
        floor = row_sims[k - 1]  # held in a register: most products fall below it
        for j in range(cand.size):
            v = row[j]
            if v < floor - slack:
                continue
            c = cand[j]
            if c == me:
                continue
            if slack > 0:
                v = bf16_units.dot(xa[i], xc[j])
                if v < floor:
                    continue
            if v == floor and c > row_ids[k - 1]:
                continue
            pos = k - 1
            while pos > 0 and (v > row_sims[pos - 1] or (v == row_sims[pos - 1] and c < row_ids[pos - 1])):
                row_sims[pos] = row_sims[pos - 1]
                row_ids[pos] = row_ids[pos - 1]
                pos -= 1
            row_sims[pos] = v
            row_ids[pos] = c
            floor = row_sims[k - 1]


def exact_sims_of_rows(x: np.ndarray, rows: np.ndarray, k: int, block: int = 65536) -> np.ndarray:
    """float32 (len(rows), k): the similarities of each of ``rows``' exact top-``k`` (itself
    excluded), descending, by blocks of columns (O(len(rows) * block) memory)."""
    best = np.full((rows.size, k), -np.inf, dtype=np.float32)
    q = take(x, rows)
    for start in range(0, x.shape[0], block):
        s = q @ f32(x[start:start + block]).T
        mine = (rows >= start) & (rows < start + block)
        s[np.flatnonzero(mine), rows[mine] - start] = -np.inf
        best = -np.partition(-np.concatenate([best, s], axis=1), k - 1, axis=1)[:, :k]
    return -np.sort(-best, axis=1)


def recall_of_rows(sims: np.ndarray, exact: np.ndarray) -> float:
    """Recall@k of lists with similarities ``sims`` (m, k) against the exact ones ``exact`` (m, k):
    the share of each row's exact top-k its list reaches (by similarity, so ties count once each)."""
    k = exact.shape[1]
    return float(np.mean(np.minimum((sims >= exact[:, k - 1:k] - 1e-6).sum(axis=1), k) / k))


def with_reverse(ids: np.ndarray, sims: np.ndarray, reverse: int) -> np.ndarray:
    """(n, k + reverse), int32 below 2^31 rows (else int64): each row's list, then up to
    ``reverse`` of the rows whose lists hold it, the most similar first (ties to the lower id), -1
    where there are fewer.

    One serial pass of insertions (``_keep_reverse``), faster than an argsort by target at the
    sizes of bench/bench_topk.py."""
    n, k = ids.shape
    graph = np.full((n, k + reverse), -1, dtype=np.int32 if n < 2**31 else np.int64)
    graph[:, :k] = ids
    if reverse:
        _keep_reverse(ids, sims, graph[:, k:], np.full((n, reverse), -np.inf, dtype=np.float32))
    return graph


@njit(cache=True)
def _keep_reverse(ids, sims, rev, rev_sims):  # pragma: no cover - compiled
    """Each row's best ``rev.shape[1]`` rows pointing to it, by similarity, then the lower id."""
    n, k = ids.shape
    r = rev.shape[1]
    for i in range(n):  # ascending sources: a tie keeps the earlier, lower one
        for t in range(k):
            dst, v = ids[i, t], sims[i, t]
            if dst < 0 or v <= rev_sims[dst, r - 1]:
                continue
            pos = r - 1
            while pos > 0 and v > rev_sims[dst, pos - 1]:
                rev_sims[dst, pos] = rev_sims[dst, pos - 1]
                rev[dst, pos] = rev[dst, pos - 1]
                pos -= 1
            rev_sims[dst, pos] = v
            rev[dst, pos] = i


@njit(parallel=True, cache=True)
def fresh_entries(graph, previous):  # pragma: no cover - compiled
    """bool, ``graph``'s shape: True where an entry of a row of ``graph`` is not in that row of
    ``previous`` (the graph of the pass before)."""
    n, m = graph.shape
    fresh = np.ones((n, m), dtype=np.bool_)
    for i in prange(n):
        for a in range(m):
            g = graph[i, a]
            for b in range(previous.shape[1]):
                if previous[i, b] == g:
                    fresh[i, a] = False
                    break
    return fresh


def refine_with_neighbours_of_neighbours(x: np.ndarray, ids: np.ndarray, sims: np.ndarray, graph: np.ndarray,
                                         fresh: np.ndarray, block: int = REFINE_BLOCK,
                                         done: Callable[[int], None] | None = None
                                         ) -> tuple[np.ndarray, np.ndarray, int]:
    """One pass of neighbour-of-neighbour refinement, as NN-descent's local join: every two rows
    of the same ``graph`` row (a row's list and reverse neighbours, ``with_reverse``) are
    compared, and each keeps the other if it beats its list. So every row meets the rows that
    share a neighbour with it, and keeps the best ``k`` it has seen.

    Only pairs with at least one ``fresh`` entry (``fresh_entries``; all True on the first pass)
    are scored: two old entries of a graph row were compared in the pass before, against a k-th
    best that has only risen since, so comparing them again cannot change the lists.

    ``x`` float32 or float16 (n, d) unit rows; ``ids`` int64 (n, k), ``sims`` float32 (n, k),
    sorted as ``topk_clustered`` returns them (-1 / -inf padding). Returns new sorted lists
    (descending, ties to the lower id) and the number of entries that changed.

    The graph rows are taken ``block`` at a time: first all their pairs are scored in parallel,
    each graph row's few rows read from ``x`` (float16 rows once into a thread's scratch, as
    float32 through a table of every float16 value's float32 one: no gathered copy of the
    block's rows is made), and the pairs that beat a list are kept; then the lists are updated
    in parallel, each thread owning a range of rows and applying that range's pairs in
    graph-row order. A pair below a list's k-th best when scored stays below it, so the lists
    depend neither on ``block`` nor on the thread count. ``done`` (when given) is called with the rows of each
    block when it is done. Scoring pairs from a graph row's few rows in cache, rather than each
    row's neighbours' neighbours one by one (a random row of ``x`` for each candidate), keeps the
    pass off memory bandwidth; bench/bench_topk.py (sparse_neighbours,
    ``CHUNKTREE_BENCH_TOPK_TOPICS=5000``) times it.
    """
    n, _k = ids.shape
    m = graph.shape[1]
    out_ids, out_sims = ids.copy(), sims.copy()
    parts = numba.get_num_threads()
    pair_cand = np.empty((min(block, n), m * (m - 1)), dtype=np.int64)
    pair_row = np.empty_like(pair_cand)
    pair_sim = np.empty(pair_cand.shape, dtype=np.float32)
    counts = np.empty(min(block, n), dtype=np.int64)
    changed = np.zeros(parts, dtype=np.int64)
    scratch = np.empty((parts, m, x.shape[1]), dtype=np.float32)
    rows, table = (readonly(x), _NO_TABLE) if x.dtype == np.float32 else (readonly(x.view(np.uint16)), _half_table())
    for start in range(0, n, block):
        stop = min(start + block, n)
        _score_pairs(rows, table, graph, fresh, out_sims, start, stop, pair_row, pair_cand, pair_sim, counts, scratch)
        _apply_pairs(out_ids, out_sims, pair_row, pair_cand, pair_sim, counts[:stop - start], changed)
        if done is not None:
            done(stop - start)
    return out_ids, out_sims, int(changed.sum())


_NO_TABLE = np.empty(0, dtype=np.float32)


@functools.cache
def _half_table() -> np.ndarray:
    """float32 (65536,): the value of every float16 bit pattern (numpy's conversion, exact)."""
    return np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)


def _read_row(x, table, i, out):  # pragma: no cover - Numba's overload below is what runs
    """Float16 row ``i`` of ``x``, given as its uint16 bits, into ``out`` as float32 through
    ``table`` (``_half_table``); float32 rows are read where they are (``_row``)."""
    raise NotImplementedError


@overload(_read_row)
def _read_row_numba(x, table, i, out):  # pragma: no cover - compiled
    if isinstance(x.dtype, types.Float):
        return lambda x, table, i, out: None

    def read(x, table, i, out):
        for t in range(out.size):
            out[t] = table[x[i, t]]
    return read


def _row(x, scratch, p, i):  # pragma: no cover - Numba's overload below is what runs
    """The float32 values of row ``i`` of ``x``, read into ``scratch[p]`` by ``_read_row``: a
    view of ``x`` for float32 rows, of ``scratch`` for float16 ones."""
    raise NotImplementedError


@overload(_row)
def _row_numba(x, scratch, p, i):  # pragma: no cover - compiled
    if isinstance(x.dtype, types.Float):
        return lambda x, scratch, p, i: x[i]
    return lambda x, scratch, p, i: scratch[p]


# Reassociation lets the dot products run as vector code; no "ninf": the lists' padding is -inf.
@njit(parallel=True, fastmath={"reassoc", "contract", "nsz", "arcp"}, cache=True)
def _score_pairs(x, table, graph, fresh, sims, start, stop, pair_row, pair_cand, pair_sim, counts, scratch):  # pragma: no cover
    """For graph rows start..stop, every pair (a, b) of a graph row with a fresh entry, kept for
    a as (a, b, similarity) where it reaches a's k-th best, and for b as (b, a, similarity).
    A graph row's float16 rows are read into the thread's ``scratch`` first (``_read_row``)."""
    m, k, d = graph.shape[1], sims.shape[1], scratch.shape[2]
    for g in prange(stop - start):
        j = start + g
        rows = scratch[numba.get_thread_id()]
        for p in range(m):
            if graph[j, p] >= 0:
                _read_row(x, table, graph[j, p], rows[p])
        e = 0
        for p in range(m):
            a = graph[j, p]
            if a < 0:
                continue
            xa = _row(x, rows, p, a)
            for q in range(p + 1, m):
                b = graph[j, q]
                if b < 0 or b == a or not (fresh[j, p] or fresh[j, q]):
                    continue
                xb = _row(x, rows, q, b)
                v = np.float32(0.0)
                for t in range(d):
                    v += xa[t] * xb[t]
                if v >= sims[a, k - 1]:
                    pair_row[g, e], pair_cand[g, e], pair_sim[g, e] = a, b, v
                    e += 1
                if v >= sims[b, k - 1]:
                    pair_row[g, e], pair_cand[g, e], pair_sim[g, e] = b, a, v
                    e += 1
        counts[g] = e


@njit(parallel=True, cache=True)
def _apply_pairs(ids, sims, pair_row, pair_cand, pair_sim, counts, changed):  # pragma: no cover - compiled
    """Insert each kept pair into its row's list (unless already there), in graph-row order;
    thread ``part`` of ``changed.size`` applies the pairs of its own range of rows."""
    n, k = ids.shape
    parts = changed.size
    for part in prange(parts):
        lo, hi = part * n // parts, (part + 1) * n // parts
        for g in range(counts.size):
            for e in range(counts[g]):
                r = pair_row[g, e]
                if r < lo or r >= hi:
                    continue
                c, v = pair_cand[g, e], pair_sim[g, e]
                row_ids, row_sims = ids[r], sims[r]
                if v < row_sims[k - 1] or (v == row_sims[k - 1] and c > row_ids[k - 1]):
                    continue
                there = False
                for t in range(k):
                    if row_ids[t] == c:
                        there = True
                        break
                if there:
                    continue
                # The insertion of _keep_best, written out again on purpose: Numba compiles a
                # shared helper (inlined or not) into a slower search (bench/bench_topk.py).
                pos = k - 1
                while pos > 0 and (v > row_sims[pos - 1] or (v == row_sims[pos - 1] and c < row_ids[pos - 1])):
                    row_sims[pos] = row_sims[pos - 1]
                    row_ids[pos] = row_ids[pos - 1]
                    pos -= 1
                row_sims[pos] = v
                row_ids[pos] = c
                changed[part] += 1
