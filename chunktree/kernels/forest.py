"""Maximum spanning forest of a sparse graph, joining its components, and rooting the tree.

A top-K neighbour graph of real data falls apart into components (often one per topic), so the
forest alone is not a tree. ``join_components`` adds, Borůvka-style, the best edge between each
component and the components nearest to it (by centroid and by mean similarity) — the best edge
of each such pair found by products of the two member sets (all of both sets for small pairs; a
small component's rows against the large one's rows nearest it; for two large ones each side's
frontier facing the other against the whole other side) — until one tree spans every vertex.
Beside those it offers spare edges (each searched row's best few into the other side), so that
the final spanning forest may join two components by more than one edge, as the best tree does.
The searches run on Python threads, each multiplying on one BLAS thread (``_searched``).
"""

import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from numba import njit, prange
from threadpoolctl import threadpool_limits

from chunktree.kernels.rows import gathered, take


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


def _descending_keys(weight: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
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
    (``_descending_keys``), which numpy's vectorised sort takes: 3.6x faster than the stable
    argsort at 330,000 edges (the last spanning forest of ``chunktree scale`` at n = 30,000), 2x
    at 16M (n = 1,000,000, K = 16), and no more memory: the keys become the indices in place (at
    16M edges a peak of 183 MB, as the argsort's)."""
    if weight.dtype != np.float32 or weight.size >= 1 << 32:
        return np.argsort(-weight, kind="stable").astype(np.int64, copy=False)
    keys = _descending_keys(weight)
    keys.sort()
    keys &= np.uint64(0xFFFFFFFF)
    return keys.view(np.int64)


def max_spanning_forest(src: np.ndarray, dst: np.ndarray, weight: np.ndarray, n: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Edge indices of a maximum spanning forest of the graph (src, dst, weight) on n vertices,
    and component labels. Equal weights are taken in edge order, so the result is deterministic."""
    order = descending(weight)
    # No copies of int64 edges: at n = 1,000,000 (16M edges) each is 128 MB of the peak.
    return kruskal(src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False), order, n)


# A pair of components is searched over all its member pairs when it has at most EXACT_PAIRS of
# them, or when one side has at most SMALL_SIDE rows and the other at most REACH. Otherwise,
# where its smaller side has at most SMALL_SIDE rows, each of those rows is searched against the
# REACH rows of the large side nearest the small side's centre (so every row of a small
# component offers its spare edges); and a pair of two large sides through its
# frontiers: the FRONTIER rows of each side nearest the other side's centre, searched against the
# whole other side. FRONTIER: on the 100-topic cases of ``chunktree scale`` (n = 30,000 and
# 50,000, components of 300-500 rows) 32 gave the tree weight of 64 in two thirds of the joining
# time, and 16 lost weight at 50,000; at n = 300,000 (bench/bench_join.py test_join) 32 took 0.7x
# the time of 64 for a tree 0.005 lighter (of 211,176), 64 the exhaustive join's tree. REACH: on
# the fuzzy cases of bench/bench_join.py (n = 20,000 to 100,000, a topic per 20 rows), where
# hundreds of small components pair with one that holds most rows, searching each small one's
# rows against all of it took 18-24% of the tree time; 256 rows took about a third of that
# joining time and lost 0.008-0.012% of the tree's weight; 128 lost more (0.014% at 20,000), 512
# less (0.003-0.008%) at 1.2-1.3x the time. EXACT_PAIRS: at n = 50,000 with 1,500 topics (1,409
# components, two of 864 and 747 rows that most others pair with) 1 << 16 searched those pairs
# whole in 1.2x the joining time of 1 << 14, which reaches them, for a tree 0.027 heavier (of
# 31,833); five other cases (n = 20,000 to 50,000, 100 to 2,500 topics) gave the same trees.
EXACT_PAIRS = 1 << 14
SMALL_SIDE = 128
FRONTIER = 32
REACH = 256
# A component of at most KERNEL_SIDE rows is searched by ``_reach_best`` (its frontiers found and
# searched against), with the small sides and reaches; a larger one by BLAS products, gathered
# once for all its pairs (``_pair_edges``).
KERNEL_SIDE = 1024


def _whole(a: int, b: int) -> bool:
    """Whether a pair of components of sizes a and b is searched over all its member pairs."""
    return a * b <= EXACT_PAIRS


# Rows and columns of one product (512 x 2,048: 4 MB of float32, which the merge reads right
# after, while it is in cache), and so the columns gathered at a time (3 MB at d = 384): the join
# never gathers a whole component, which on fuzzy data holds most rows.
ROW_STEP = 512
COLUMN_BLOCK = 2048
# Columns the merge tests at a time against a row's floor before it looks at each one.
CHUNK = 128
# The fewest rows of a part of a search (``_searched``): each part gathers every column again.
# On fuzzy data (225 centres against a component of 44,656 rows, n = 50,000) parts of 28 rows
# took 1.4x the time of one search with BLAS on both cores.
PART_ROWS = 128


@njit(cache=True, nogil=True)
def _keep_best(y, first, pos, score):  # pragma: no cover - compiled
    """Merge the products ``y`` (rows x block, float32) into each row's best ``pos.shape[1]``
    columns (positions, from ``first``, and scores), kept as a min-heap a row on (score, -column):
    its root is the entry to drop first, the lowest score and, of equal ones, the later column.
    Blocks come in column order, so a new column that only ties the root is dropped: equal
    scores go to the earlier column. ``_ranked`` sorts the rows after the last block.

    A row's floor (its root) rises fast, so most chunks of ``CHUNK`` columns hold nothing above
    it: a chunk is first tested whole, as comparisons that LLVM vectorises. A heap replaces an
    entry in log m steps where a sorted row moves m / 2.
    """
    m = pos.shape[1]
    for i in range(y.shape[0]):
        row_pos, row_score = pos[i], score[i]
        for j0 in range(0, y.shape[1], CHUNK):
            j1 = min(j0 + CHUNK, y.shape[1])
            floor = row_score[0]
            above = False
            for j in range(j0, j1):
                above |= y[i, j] > floor
            if not above:
                continue
            for j in range(j0, j1):
                v = y[i, j]
                if v <= row_score[0]:
                    continue
                c = first + j
                k = 0  # the root's place, sifted down to where (v, c) belongs
                while 2 * k + 1 < m:
                    s = 2 * k + 1
                    if s + 1 < m and (row_score[s + 1] < row_score[s]
                                      or (row_score[s + 1] == row_score[s] and row_pos[s + 1] > row_pos[s])):
                        s += 1
                    if v < row_score[s] or (v == row_score[s] and c > row_pos[s]):
                        break
                    row_score[k], row_pos[k] = row_score[s], row_pos[s]
                    k = s
                row_score[k], row_pos[k] = v, c


def _ranked(pos: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``_keep_best``'s heaps sorted: descending score, equal scores to the earlier column,
    the empty entries (-1 / -inf) last."""
    order = np.lexsort((pos, -score), axis=1)
    return np.take_along_axis(pos, order, axis=1), np.take_along_axis(score, order, axis=1)


def _best_edges_into(x: np.ndarray, left: np.ndarray, cols: np.ndarray, per: int = 1
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Each of the vectors ``left``' (r, d) best ``per`` edges into the rows ``cols`` of ``x``, by
    blocked matrix products (BLAS, on its own threads), each merged at once (``_keep_best``).

    Returns ``(ids, sims)``, int64 and float32 (r, per): column ids and their similarities,
    descending, equal similarities to the earlier column; where ``cols`` has fewer than ``per``
    members the tail is -1 / -inf. Memory: one column block and one product.
    """
    pos = np.full((left.shape[0], per), -1, dtype=np.int64)
    score = np.full((left.shape[0], per), -np.inf, dtype=np.float32)
    for c0 in range(0, cols.size, COLUMN_BLOCK):
        right = take(x, cols[c0:c0 + COLUMN_BLOCK]).T
        for r0 in range(0, left.shape[0], ROW_STEP):
            r1 = r0 + ROW_STEP
            _keep_best(left[r0:r1] @ right, c0, pos[r0:r1], score[r0:r1])
    pos, score = _ranked(pos, score)
    return np.where(pos >= 0, cols[np.where(pos >= 0, pos, 0)], -1), score


def _key_weights(keys: np.ndarray) -> np.ndarray:
    """The float32 weights of ``_descending_keys``' keys."""
    order = (keys >> np.uint64(32)).astype(np.uint32)
    bits = np.where(order >> np.uint32(31), order & np.uint32(0x7FFFFFFF), ~order)
    return -bits.view(np.float32)


@njit(cache=True, nogil=True)
def _above(y, floor):  # pragma: no cover - compiled
    """Each row's products above its floor: (values, columns), float32 and int64 (rows x the most
    of any row), in column order, padded with -inf / 0. One pass to count and one to copy, where
    numpy's nonzero and scatter took a third of the search (928 centres against 14,002 rows)."""
    counts = np.zeros(y.shape[0], np.int64)
    for i in range(y.shape[0]):
        f, c = floor[i], 0
        for j in range(y.shape[1]):
            c += y[i, j] > f
        counts[i] = c
    m = counts.max() if y.shape[0] else 0
    values = np.full((y.shape[0], m), -np.inf, np.float32)
    at = np.zeros((y.shape[0], m), np.int64)
    for i in range(y.shape[0]):
        if counts[i] == 0:
            continue
        f, c = floor[i], 0
        for j in range(y.shape[1]):
            if y[i, j] > f:
                values[i, c], at[i, c] = y[i, j], j
                c += 1
    return values, at


def _nearest_members(x: np.ndarray, vectors: np.ndarray, cols: np.ndarray, k: int) -> tuple[np.ndarray]:
    """The ``k`` rows of ``cols`` (at most 2^32) most similar to each of the vectors (r, d),
    equal similarities to the earlier row: (r, min(k, cols.size)) ids of ``x``, in the order of
    ``cols``.

    The products of a block of columns become ``_descending_keys``, partitioned with the kept
    ones; once a row keeps ``k``, only the products above its lowest kept one (a later column
    that only ties it loses, ``_above``) are keyed, and the partition takes the kept keys and
    those. For 814 centres against 4,749 rows, k = 256, this took 0.6x the time of
    ``_keep_best``'s heaps, which also rank."""
    r = vectors.shape[0]
    kept = np.empty((r, 0), np.uint64)
    for c0 in range(0, cols.size, COLUMN_BLOCK):
        y = vectors @ take(x, cols[c0:c0 + COLUMN_BLOCK]).T
        if kept.shape[1] < k:
            keys = np.concatenate([kept, _descending_keys(y, np.arange(c0, c0 + y.shape[1], dtype=np.uint32))], axis=1)
        else:
            values, at = _above(y, _key_weights(kept.max(axis=1)))
            if values.shape[1] == 0:
                continue
            keys = np.concatenate([kept, _descending_keys(values, at + c0)], axis=1)
        kept = np.partition(keys, k - 1, axis=1)[:, :k] if keys.shape[1] > k else keys
    return (cols[np.sort((kept & np.uint64(0xFFFFFFFF)).astype(np.int64), axis=1)],)


def _searched(x: np.ndarray, jobs: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]],
              search: Callable[..., tuple[np.ndarray, ...]] = _best_edges_into) -> list[tuple[np.ndarray, ...]]:
    """``search(x, vectors[rows], cols, per)`` of each job (vectors, rows, cols, per), in order:
    ``_best_edges_into`` or ``_nearest_members``.

    The jobs, cut into parts of rows of about equal work (a frontier job of 814 centres against
    one component outweighed all others together), are shared out among Numba's number of Python
    threads, the largest first, each thread multiplying on one BLAS thread (the caller holds BLAS
    to one, see ``join_components``) and merging (``_keep_best`` and numpy's partition release
    the GIL): every core multiplies and merges, and no BLAS thread is left spinning to slow the
    Numba-parallel ``_reach_best`` after it. Each part gathers its own rows (gathering the
    searched rows of all pairs at once copied 77 MB at n = 30,000) and has at least
    ``PART_ROWS`` of them; a round of fewer parts than threads runs its jobs whole, on BLAS's
    own threads. A row's result does not depend on its part, up to the rounding of its products
    (BLAS may sum a row's products in another order in a block of another shape)."""
    def part_search(part: tuple[int, int, int]) -> tuple[np.ndarray, ...]:
        vectors, rows, cols, per = jobs[part[0]]
        return search(x, take(vectors, rows[part[1]:part[2]]), cols, per)

    threads = numba.get_num_threads()
    work = [rows.size * cols.size for _, rows, cols, _ in jobs]
    share = max(sum(work) / (4 * threads), 1.0)
    parts = []  # (job, first row, last row), job by job in row order; job j's are parts[bounds[j]:bounds[j + 1]]
    bounds = [0]
    for j, (_, rows, _, _) in enumerate(jobs):
        cuts = np.linspace(0, rows.size, max(1, min(int(np.ceil(work[j] / share)), rows.size // PART_ROWS)) + 1)
        parts += [(j, int(a), int(b)) for a, b in itertools.pairwise(cuts.astype(np.int64))]
        bounds.append(len(parts))
    if len(parts) < threads:  # too few rows to share: BLAS's own threads multiply
        with threadpool_limits(threads, user_api="blas"):
            return [part_search((j, 0, job[1].size)) for j, job in enumerate(jobs)]
    largest = sorted(range(len(parts)), key=lambda i: -(parts[i][2] - parts[i][1]) * jobs[parts[i][0]][2].size)
    with ThreadPoolExecutor(threads) as pool:
        found = dict(zip(largest, pool.map(lambda i: part_search(parts[i]), largest)))
    return [tuple(np.concatenate(arrays) for arrays in zip(*(found[i] for i in range(a, b))))
            for a, b in itertools.pairwise(bounds)]


# Reassociation lets the dot products run as vector code; no "ninf": the lists start at -inf.
@njit(parallel=True, fastmath={"reassoc", "contract", "nsz", "arcp"}, cache=True)
def _reach_best(lefts, rows, starts, x, fronts, front_starts, shares, per):  # pragma: no cover - compiled
    """Each row's best ``per`` edges into its pair's front: the rows ``rows[starts[q]:starts[q +
    1]]`` of ``lefts`` against the rows ``fronts[front_starts[q]:front_starts[q + 1]]`` of ``x``,
    (ids, similarities) descending, equal similarities to the one earlier in the front; -1 / -inf
    where the front has fewer than ``per`` rows. ``lefts`` and ``x`` are float32.

    The pairs ``shares[t]:shares[t + 1]`` make one thread's share (``_shares``); each pair
    gathers its own rows, then takes them two at a time against its front four rows at a time:
    eight sums in registers, each load serving two or four products (one row at a time took
    1.2-1.3x the time on the pairs of n = 30,000 and 40,000 with 1,000 and 1,500 topics; four at
    a time gained little more, and eight sums fit AVX2's registers)."""
    d = lefts.shape[1]
    ids = np.full((rows.size, per), -1, np.int64)
    sims = np.full((rows.size, per), -np.inf, np.float32)
    for t in prange(shares.size - 1):
        for q in range(shares[t], shares[t + 1]):
            a, b = starts[q], starts[q + 1]
            left = np.zeros((b - a + 1, d), np.float32)  # a row of zeros pads an odd count
            for i in range(b - a):
                left[i] = lefts[rows[a + i]]
            y = np.empty((b - a + 1, 4), np.float32)
            for j0 in range(front_starts[q], front_starts[q + 1], 4):
                c = fronts[j0:min(j0 + 4, front_starts[q + 1])]
                c0, c1, c2, c3 = x[c[0]], x[c[min(1, c.size - 1)]], x[c[min(2, c.size - 1)]], x[c[min(3, c.size - 1)]]
                for i in range(0, b - a, 2):
                    u, w = left[i], left[i + 1]
                    u0 = u1 = u2 = u3 = w0 = w1 = w2 = w3 = np.float32(0.0)
                    for e in range(d):
                        f0, f1, f2, f3 = c0[e], c1[e], c2[e], c3[e]
                        ue, we = u[e], w[e]
                        u0 += ue * f0
                        u1 += ue * f1
                        u2 += ue * f2
                        u3 += ue * f3
                        w0 += we * f0
                        w1 += we * f1
                        w2 += we * f2
                        w3 += we * f3
                    y[i, 0], y[i, 1], y[i, 2], y[i, 3] = u0, u1, u2, u3
                    y[i + 1, 0], y[i + 1, 1], y[i + 1, 2], y[i + 1, 3] = w0, w1, w2, w3
                for i in range(b - a):
                    row_id, row_sim = ids[a + i], sims[a + i]
                    for k in range(c.size):
                        v = y[i, k]
                        if v <= row_sim[per - 1]:
                            continue
                        p = per - 1
                        while p > 0 and v > row_sim[p - 1]:
                            row_sim[p], row_id[p] = row_sim[p - 1], row_id[p - 1]
                            p -= 1
                        row_sim[p], row_id[p] = v, c[k]
    return ids, sims


def _shares(work: np.ndarray) -> np.ndarray:
    """Bounds that cut the pairs of ``_reach_best``, of the given work each, into one share of
    about equal work per Numba thread: its ``prange`` hands each thread an equal number of
    iterations, and the pairs of a join differ in work 50-fold (small sides of 17 rows against
    each other, of 54 against a reach of 256)."""
    done = np.cumsum(work)
    cuts = np.searchsorted(done, done[-1] * np.arange(1, numba.get_num_threads()) / numba.get_num_threads())
    return np.concatenate([[0], cuts, [work.size]]).astype(np.int64)


GATHER_ROWS = 1 << 17  # float32 copies of float16 rows held at once by ``_kernel_searched``


def _kernel_searched(lefts: np.ndarray, x: np.ndarray, searches: list[tuple[np.ndarray, np.ndarray]], per: int,
                     gather: int = GATHER_ROWS) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``_reach_best`` over the searches (rows of ``lefts``, rows of ``x`` they are searched
    against): (rows, starts, ids, sims), the rows of all searches one after another, search s's
    at ``starts[s]:starts[s + 1]``."""
    rows = np.concatenate([rows for rows, _ in searches])
    starts = np.cumsum([0] + [rows.size for rows, _ in searches])
    fronts = np.concatenate([front for _, front in searches])
    front_starts = np.cumsum([0] + [front.size for _, front in searches])
    work = np.diff(starts) * np.diff(front_starts)
    if x.dtype == np.float32:
        return (rows, starts) + _reach_best(lefts, rows, starts, x, fronts, front_starts, _shares(work), per)
    # float16 rows: the kernel reads float32 copies of the rows it uses, gathered for a batch of
    # searches at a time, so that the copies hold about ``gather`` rows however many searches
    # there are (on fine-grained data every row is in a small side, searched against two or three
    # partners: one copy of them all took 4 GB at n = 1,000,000).
    held = np.cumsum(np.diff(starts) + np.diff(front_starts))  # rows gathered by the searches up to each
    ids_parts, sims_parts = [], []
    s = 0
    while s < len(searches):
        before = int(held[s - 1]) if s else 0
        e = max(s + 1, int(np.searchsorted(held, before + gather, side="right")))
        r, f = rows[starts[s]:starts[e]], fronts[front_starts[s]:front_starts[e]]
        if lefts is x:
            xs, local, used = gathered(x, np.concatenate([r, f]))
            ls, local_rows, local_fronts = xs, local[:r.size], local[r.size:]
        else:
            xs, local_fronts, used = gathered(x, f)
            ls, local_rows = lefts, r
        ids, sims = _reach_best(ls, local_rows, starts[s:e + 1] - starts[s], xs, local_fronts,
                                front_starts[s:e + 1] - front_starts[s], _shares(work[s:e]), per)
        ids_parts.append(np.where(ids >= 0, used[np.maximum(ids, 0)], -1))
        sims_parts.append(sims)
        s = e
    return rows, starts, np.concatenate(ids_parts), np.concatenate(sims_parts)


def _spare_edges(rows: np.ndarray, ids: np.ndarray, sims: np.ndarray, per_row: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each searched row's first ``per_row`` edges (src, dst, weight) of a search's (ids, sims),
    leaving out the empty ones (-1 / -inf: a side or frontier of fewer rows offers fewer edges)."""
    found = ids[:, :per_row] >= 0
    return (np.repeat(rows, per_row).reshape(-1, per_row)[found], ids[:, :per_row][found],
            sims[:, :per_row][found])


def _first_maxima(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The index of the first maximum of each segment ``values[starts[s]:starts[s + 1]]`` (none
    empty); one pass for all segments, where an argmax a segment took 8 ms of a 0.2 s join."""
    peaks = np.maximum.reduceat(values, starts[:-1])
    at = np.where(values == np.repeat(peaks, np.diff(starts)), np.arange(values.size), values.size)
    return np.minimum.reduceat(at, starts[:-1])


def _pair_edges(x: np.ndarray, groups: list[np.ndarray], centres: np.ndarray, pairs: list[tuple[int, int]],
                per_row: int = 0) -> tuple[list[tuple[int, int, float]], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The best edge (i in the first component, j in the second, similarity) of each pair of
    components, in the order of ``pairs``, and the spare edges: every searched row's best
    ``per_row`` edges into the component it was searched against (src the searched row).

    A small side (at most ``SMALL_SIDE`` rows) is searched against the other side whole where it
    has at most ``REACH`` rows, else against its ``REACH`` rows nearest the small side's centre.
    Another pair is searched over all its member pairs (``_whole``) as the smaller side's rows
    against the larger side; a pair of large sides as each side's ``FRONTIER`` rows nearest the
    other side's centre against the whole other side (two products of FRONTIER x size instead of
    one of size x size).

    The frontiers and reaches are found first: in a component of at most ``KERNEL_SIDE`` rows by
    ``_reach_best`` (the partner's centre against it), in a larger one by a ``_searched`` round
    of ``_nearest_members``. Then the small sides, the reaches and the frontiers facing a
    component of at most ``KERNEL_SIDE`` rows are searched in one ``_reach_best`` call; the other
    searches against one component, from all its pairs, as one BLAS job of a second
    ``_searched`` round, which gathers the component (in blocks) once a part (on clear data, 100
    topics, the 454 frontier searches of 227 pairs took 0.66 of the 0.91 s of joining one by
    one). At n = 20,001 with 100 topics (components of about 200 rows) the joining took 1.8x the
    time with every frontier found and searched in BLAS rounds: a round's Python and threads
    cost more than its products.
    """
    # Searches by the component searched against: (rows, pair, whether the rows are in its first component).
    searches: dict[int, list[tuple[np.ndarray, int, bool]]] = {}
    facing: dict[int, list[tuple[int, int]]] = {}  # each side of a large pair: component -> (partner, pair)
    reach: dict[int, list[tuple[int, int]]] = {}  # a large component -> (small partner, pair)
    # Searches in ``_reach_best``: (rows, the rows they are searched against, pair, whether the rows are in its first component).
    sides: list[tuple[np.ndarray, np.ndarray, int, bool]] = []
    for p, (g, h) in enumerate(pairs):
        big, small = (g, h) if groups[g].size >= groups[h].size else (h, g)
        if groups[small].size <= SMALL_SIDE and groups[big].size <= REACH:
            sides.append((groups[small], groups[big], p, small == g))
        elif _whole(groups[g].size, groups[h].size):
            searches.setdefault(big, []).append((groups[small], p, small == g))
        elif groups[small].size <= SMALL_SIDE:
            reach.setdefault(big, []).append((small, p))
        else:
            facing.setdefault(g, []).append((h, p))
            facing.setdefault(h, []).append((g, p))
    # The frontiers and reaches: a large component's members nearest each partner's centre; in
    # ``_reach_best`` for a component of at most KERNEL_SIDE rows, else in a round of BLAS searches.
    kernel = [(g, h, p) for g, partners in facing.items() if groups[g].size <= KERNEL_SIDE for h, p in partners]
    facing = {g: partners for g, partners in facing.items() if groups[g].size > KERNEL_SIDE}
    fronts = _searched(x, [(centres, np.array([h for h, _ in partners]), groups[g], FRONTIER) for g, partners in facing.items()]
                       + [(centres, np.array([h for h, _ in partners]), groups[g], REACH) for g, partners in reach.items()],
                       _nearest_members)
    faced = [(g, h, p, front[i]) for (g, partners), (front,) in zip(facing.items(), fronts) for i, (h, p) in enumerate(partners)]
    if kernel:
        ids = _kernel_searched(centres, x, [(np.array([h]), groups[g]) for g, h, _ in kernel], FRONTIER)[2]
        faced += [(g, h, p, front[front >= 0]) for (g, h, p), front in zip(kernel, ids)]
    for g, h, p, front in faced:
        if groups[h].size <= KERNEL_SIDE:
            sides.append((front, groups[h], p, g == pairs[p][0]))
        else:
            searches.setdefault(h, []).append((front, p, g == pairs[p][0]))
    for partners, (front,) in zip(reach.values(), fronts[len(facing):]):
        sides += [(groups[h], front[i], p, h == pairs[p][0]) for i, (h, p) in enumerate(partners)]
    best: dict[int, tuple[int, int, float]] = {}
    spare = [(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32))]

    def take(rows: np.ndarray, starts: np.ndarray, ids: np.ndarray, sims: np.ndarray,
             searched: list[tuple[int, bool]]) -> None:
        """Keep the spare edges of searches (rows of search s at starts[s]:starts[s + 1]) and each
        pair's best edge, ``searched`` giving each search's (pair, rows in its first component)."""
        if per_row:
            spare.append(_spare_edges(rows, ids, sims, per_row))
        for (p, first), top in zip(searched, _first_maxima(sims[:, 0], starts).tolist()):
            i, j, v = int(rows[top]), int(ids[top, 0]), float(sims[top, 0])
            if p not in best or v > best[p][2]:
                best[p] = (i, j, v) if first else (j, i, v)

    if sides:  # all at once
        sides.sort(key=lambda side: int(side[0][0]))  # a component's searches one after another, its rows in cache
        rows, starts, ids, sims = _kernel_searched(x, x, [(rows, front) for rows, front, _, _ in sides], max(per_row, 1))
        take(rows, starts, ids, sims, [(p, first) for _, _, p, first in sides])
    searched = {target: np.concatenate([r for r, _, _ in jobs]) for target, jobs in searches.items()}
    found = _searched(x, [(x, rows, groups[target], max(per_row, 1)) for target, rows in searched.items()])
    for (target, jobs), (ids, sims) in zip(searches.items(), found):
        take(searched[target], np.cumsum([0] + [r.size for r, _, _ in jobs]), ids, sims, [(p, first) for _, p, first in jobs])
    spare_edges = (np.concatenate([part[0] for part in spare]), np.concatenate([part[1] for part in spare]),
                   np.concatenate([part[2] for part in spare]))
    return [best[p] for p in range(len(pairs))], spare_edges


def component_sums(x: np.ndarray, members: np.ndarray, bounds: np.ndarray, block: int = 65536) -> np.ndarray:
    """The sum of each component's rows, float64 (c, d) (``_component_sums``); float16 rows are
    read as float32 ``block`` members at a time."""
    if x.dtype == np.float32:
        return _component_sums(x, members, bounds)
    sums = np.zeros((bounds.size - 1, x.shape[1]), np.float64)
    for start in range(0, members.size, block):
        stop = min(start + block, members.size)
        sums += _component_sums(take(x, members[start:stop]), np.arange(stop - start), np.clip(bounds, start, stop) - start)
    return sums


@njit(parallel=True, cache=True)
def _component_sums(x, members, bounds):  # pragma: no cover - compiled
    """The sum of each component's rows, float64 (c, d): component g holds the rows
    ``members[bounds[g]:bounds[g + 1]]``. In parallel over components, in a third of the time of
    scipy's sparse indicator product (7 ms at n = 30,000, 816 components)."""
    sums = np.zeros((bounds.size - 1, x.shape[1]), np.float64)
    for g in prange(bounds.size - 1):
        for i in members[bounds[g]:bounds[g + 1]]:
            for t in range(x.shape[1]):
                sums[g, t] += x[i, t]
    return sums


PARTNER_BLOCK = 1 << 24  # entries of the component similarities held at once by ``_partners``


def _partners(sums: np.ndarray, sizes: np.ndarray, candidates: int, block: int = PARTNER_BLOCK
              ) -> list[tuple[int, int]]:
    """The pairs (g < h) of components to search, sorted: each component with the one whose
    centroid is most similar to its own, and with the ``candidates`` of the highest mean
    similarity between their members and its own (the product of the two mean vectors).

    A component of many topics has a centroid near the mean of all rows: it is the nearest
    centroid of most components, and the largest, which holds the most topics, holds the best
    edge of many small ones (283 of the 815 edges of the best joining tree at n = 30,000, 1,000
    topics). Its members are spread, so the mean similarity ranks it low, and ranks the small
    components by topic: with three nearest centroids a component of 170 rows was a partner of
    810 of the 816 components (8 of its edges in the best tree). Measured against the best
    joining tree (every pair of components searched whole), at n = 30,000 / 50,000 with 1,000
    topics: three nearest centroids joined 413.4 / 504.5 of 419.4 / 522.1 with 2,440 / 2,675
    pairs; the nearest centroid and two highest mean similarities 414.3 / 505.2 with 2,320 /
    2,409."""
    c = sums.shape[0]
    means = (sums / sizes[:, None]).astype(np.float32)
    norms = np.sqrt(np.maximum(np.einsum("ij,ij->i", means, means), 1e-30)).astype(np.float32)
    m = min(candidates, c - 1)
    near = np.empty((c, m + 1), np.int64)
    # Blocks of rows of the c x c similarities, so that memory stays ``block`` entries however many
    # components there are (fine-grained data leaves one per topic: 100,000 at 10M rows).
    step = max(1, block // c)
    for start in range(0, c, step):
        stop = min(start + step, c)
        sims = means[start:stop] @ means.T
        sims[np.arange(stop - start), np.arange(start, stop)] = -np.inf
        near[start:stop, 1:] = np.argpartition(sims, c - m, axis=1)[:, c - m:]
        sims /= norms
        near[start:stop, 0] = np.argmax(sims, axis=1)
    return sorted({(min(g, h), max(g, h)) for g, row in enumerate(near.tolist()) for h in row})


def join_components(x: np.ndarray, labels: np.ndarray, candidates: int = 2, per_row: int = 0,
                    said: Callable[[str, float], None] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges (src, dst, weight) that join the components given by ``labels`` of the float32 unit
    rows ``x`` into one tree, then ``per_row`` spare edges for each row searched.

    Each round, every component is paired with the component of the nearest centroid and the
    ``candidates`` of the highest mean similarity to its members (``_partners``); the best edge
    of each pair is found by ``_pair_edges`` (over all member pairs for small pairs, through
    the rows facing the other component for large ones), and Kruskal over those edges merges
    components. Every component gains an edge each round, so the number of components at least
    halves per round.

    The first edges returned (one fewer than the components) join the components into one tree.
    The spare edges after them are each searched row's best ``per_row`` edges into the component
    it was searched against: the best tree may join two components by more than one edge, and a
    maximum spanning forest of the components' own edges and all of these is one spanning tree,
    never lighter than the one the joining edges alone give. ``said`` gets a line per round and
    the round's seconds.
    """
    src_all, dst_all, w_all = [], [], []
    spare_all: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    labels = labels.copy()
    # One BLAS thread: the searches run on threads of their own (``_searched``).
    with threadpool_limits(1, user_api="blas"):
        rounds = 0
        while True:
            started = time.perf_counter()
            comps, inverse = np.unique(labels, return_inverse=True)
            c = comps.size
            if c <= 1:
                break
            members = np.argsort(inverse, kind="stable")
            bounds = np.searchsorted(inverse[members], np.arange(c + 1))
            groups = [members[bounds[g]:bounds[g + 1]] for g in range(c)]
            sums = component_sums(x, members, bounds)
            pairs = _partners(sums, np.diff(bounds), candidates)
            centres = (sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)).astype(np.float32)
            edges, spare = _pair_edges(x, groups, centres, pairs, per_row)
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
            rounds += 1
            if said is not None:
                took = time.perf_counter() - started
                said(f"joining components, round {rounds}: {c:,} -> {c - taken.size:,} components, {len(pairs):,} "
                     f"pairs searched, {took:.0f} s", took)
    if not src_all:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32)
    return (np.concatenate(src_all + [s[0] for s in spare_all]), np.concatenate(dst_all + [s[1] for s in spare_all]),
            np.concatenate(w_all + [s[2] for s in spare_all]))


def load_kernels() -> None:
    """Load the join's compiled kernels (compiling them on the first use after an install or a
    change), so that a join timed after it times the join alone: a small join whose pairs take
    every path (small components whole against each other and through their reaches into one
    of more than ``COLUMN_BLOCK`` rows; a pair of large ones through their frontiers, found and
    searched by ``_reach_best`` in the one of at most ``KERNEL_SIDE`` rows and by BLAS in the
    other), of writable vectors and of read-only ones (as ``order`` passes vectors that were
    unit rows already; Numba compiles each kind apart)."""
    x = np.random.default_rng(0).standard_normal((2540, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = np.repeat(np.arange(4), [2300, 130, 100, 10])
    join_components(x, labels, candidates=3, per_row=1)
    x.flags.writeable = False
    join_components(x, labels, candidates=3, per_row=1)


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
