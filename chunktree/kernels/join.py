"""Joining the components of a top-K neighbour graph into one spanning tree.

A top-K neighbour graph of real data falls apart into components (often one per topic), so its
spanning forest alone is not a tree. ``join_components`` adds, Borůvka-style, the best edge between
each component and the components nearest to it (by centroid and by mean similarity) — the best
edge of each such pair found by products of the two member sets (all of both sets for small pairs;
a small component's rows against the large one's rows nearest it; for two large ones each side's
frontier facing the other against the whole other side) — until one tree spans every vertex.
Beside those it offers spare edges (each searched row's best few into the other side), so that
the final spanning forest may join two components by more than one edge, as the best tree does.
The searches run on Python threads, each multiplying on one BLAS thread (``_searched``). How far
each search reaches is a ``JoinSettings``; bench/bench_join.py weighs them against the exhaustive
join (docs/benchmarks.md).
"""

import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
from numba import njit, prange
from threadpoolctl import threadpool_limits

from chunktree.checks import normalised
from chunktree.kernels.forest import descending_keys, kruskal, max_spanning_forest
from chunktree.kernels.rows import gathered, readonly, take


@dataclass(frozen=True)
class JoinSettings:
    """How far the join searches each pair of components, and in what blocks.

    A pair is searched over all its member pairs when it has at most ``exact_pairs`` of them, or
    when one side has at most ``small_side`` rows and the other at most ``reach``. Otherwise a
    small side's rows are searched against the ``reach`` rows of the large side nearest the small
    side's centre (so every row of a small component offers its spare edges), and a pair of two
    large sides through its frontiers: the ``frontier`` rows of each side nearest the other side's
    centre, searched against the whole other side. The defaults give the exhaustive join's tree
    weight within a few parts in 10,000 at a fraction of its time (bench/bench_join.py).

    A component of at most ``kernel_side`` rows is searched by the compiled ``_reach_best``; a
    larger one by BLAS products of ``row_step`` x ``column_block`` (a product the merge reads
    while it is in cache; the join never gathers a whole component), in parts of at least
    ``part_rows`` rows (each part gathers every column again).
    """

    exact_pairs: int = 1 << 14
    small_side: int = 128
    frontier: int = 32
    reach: int = 256
    kernel_side: int = 1024
    row_step: int = 512
    column_block: int = 2048
    part_rows: int = 128

    def whole(self, a: int, b: int) -> bool:
        """Whether a pair of components of sizes a and b is searched over all its member pairs."""
        return a * b <= self.exact_pairs


DEFAULT_SETTINGS = JoinSettings()
# Columns the merge tests at a time against a row's floor before it looks at each one.
CHUNK = 128


@njit(cache=True, nogil=True)
def _keep_best_columns(y, first, pos, score):  # pragma: no cover - compiled
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
    """Rows of ``_keep_best_columns``'s heaps sorted: descending score, equal scores to the earlier column,
    the empty entries (-1 / -inf) last."""
    order = np.lexsort((pos, -score), axis=1)
    return np.take_along_axis(pos, order, axis=1), np.take_along_axis(score, order, axis=1)


def _best_edges_into(x: np.ndarray, left: np.ndarray, cols: np.ndarray, per: int = 1,
                     settings: JoinSettings = DEFAULT_SETTINGS) -> tuple[np.ndarray, np.ndarray]:
    """Each of the vectors ``left``' (r, d) best ``per`` edges into the rows ``cols`` of ``x``, by
    blocked matrix products (BLAS, on its own threads), each merged at once (``_keep_best_columns``).

    Returns ``(ids, sims)``, int64 and float32 (r, per): column ids and their similarities,
    descending, equal similarities to the earlier column; where ``cols`` has fewer than ``per``
    members the tail is -1 / -inf. Memory: one column block and one product.
    """
    pos = np.full((left.shape[0], per), -1, dtype=np.int64)
    score = np.full((left.shape[0], per), -np.inf, dtype=np.float32)
    step, block = settings.row_step, settings.column_block
    for c0 in range(0, cols.size, block):
        right = take(x, cols[c0:c0 + block]).T
        for r0 in range(0, left.shape[0], step):
            r1 = r0 + step
            _keep_best_columns(left[r0:r1] @ right, c0, pos[r0:r1], score[r0:r1])
    pos, score = _ranked(pos, score)
    return np.where(pos >= 0, cols[np.where(pos >= 0, pos, 0)], -1), score


def _key_weights(keys: np.ndarray) -> np.ndarray:
    """The float32 weights of ``descending_keys``' keys."""
    order = (keys >> np.uint64(32)).astype(np.uint32)
    bits = np.where(order >> np.uint32(31), order & np.uint32(0x7FFFFFFF), ~order)
    return -bits.view(np.float32)


@njit(cache=True, nogil=True)
def _above(y, floor):  # pragma: no cover - compiled
    """Each row's products above its floor: (values, columns), float32 and int64 (rows x the most
    of any row), in column order, padded with -inf / 0. One pass to count and one to copy, in
    place of numpy's nonzero and scatter."""
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


def _nearest_members(x: np.ndarray, vectors: np.ndarray, cols: np.ndarray, k: int,
                     settings: JoinSettings = DEFAULT_SETTINGS) -> tuple[np.ndarray]:
    """The ``k`` rows of ``cols`` (at most 2^32) most similar to each of the vectors (r, d),
    equal similarities to the earlier row: (r, min(k, cols.size)) ids of ``x``, in the order of
    ``cols``.

    The products of a block of columns become ``descending_keys``, partitioned with the kept
    ones; once a row keeps ``k``, only the products above its lowest kept one (a later column
    that only ties it loses, ``_above``) are keyed, and the partition takes the kept keys and
    those: cheaper than ``_keep_best_columns``' heaps, which also rank."""
    r = vectors.shape[0]
    kept = np.empty((r, 0), np.uint64)
    block = settings.column_block
    for c0 in range(0, cols.size, block):
        y = vectors @ take(x, cols[c0:c0 + block]).T
        if kept.shape[1] < k:
            keys = np.concatenate([kept, descending_keys(y, np.arange(c0, c0 + y.shape[1], dtype=np.uint32))], axis=1)
        else:
            values, at = _above(y, _key_weights(kept.max(axis=1)))
            if values.shape[1] == 0:
                continue
            keys = np.concatenate([kept, descending_keys(values, at + c0)], axis=1)
        kept = np.partition(keys, k - 1, axis=1)[:, :k] if keys.shape[1] > k else keys
    return (cols[np.sort((kept & np.uint64(0xFFFFFFFF)).astype(np.int64), axis=1)],)


def _searched(x: np.ndarray, jobs: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]],
              search: Callable[..., tuple[np.ndarray, ...]] = _best_edges_into,
              settings: JoinSettings = DEFAULT_SETTINGS) -> list[tuple[np.ndarray, ...]]:
    """``search(x, vectors[rows], cols, per, settings)`` of each job (vectors, rows, cols, per), in order:
    ``_best_edges_into`` or ``_nearest_members``.

    The jobs, cut into parts of rows of about equal work (one frontier job can outweigh all the
    others together), are shared out among Numba's number of Python
    threads, the largest first, each thread multiplying on one BLAS thread (the caller holds BLAS
    to one, see ``join_components``) and merging (``_keep_best_columns`` and numpy's partition release
    the GIL): every core multiplies and merges, and no BLAS thread is left spinning to slow the
    Numba-parallel ``_reach_best`` after it. Each part gathers its own rows (not the searched rows
    of all pairs at once) and has at least ``settings.part_rows`` of them; a round of fewer parts
    than threads runs its jobs whole, on BLAS's own threads. A row's result does not depend on its
    part, up to the rounding of its products (BLAS may sum a row's products in another order in a
    block of another shape)."""
    def part_search(part: tuple[int, int, int]) -> tuple[np.ndarray, ...]:
        vectors, rows, cols, per = jobs[part[0]]
        return search(x, take(vectors, rows[part[1]:part[2]]), cols, per, settings)

    threads = numba.get_num_threads()
    work = [rows.size * cols.size for _, rows, cols, _ in jobs]
    share = max(sum(work) / (4 * threads), 1.0)
    parts = []  # (job, first row, last row), job by job in row order; job j's are parts[bounds[j]:bounds[j + 1]]
    bounds = [0]
    for j, (_, rows, _, _) in enumerate(jobs):
        cuts = np.linspace(0, rows.size, max(1, min(int(np.ceil(work[j] / share)), rows.size // settings.part_rows)) + 1)
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
    eight sums in registers, each load serving two or four products; eight sums fit AVX2's
    registers (bench/bench_join.py times the join)."""
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
    iterations, and the pairs of a join differ in work many-fold (small sides against each other,
    against a reach)."""
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
        return (rows, starts) + _reach_best(readonly(lefts), rows, starts, readonly(x), fronts, front_starts, _shares(work), per)
    # float16 rows: the kernel reads float32 copies of the rows it uses, gathered for a batch of
    # searches at a time, so that the copies hold about ``gather`` rows however many searches
    # there are (on fine-grained data every row is in a small side, searched against two or three
    # partners, so one copy of them all would hold every row several times).
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
        ids, sims = _reach_best(readonly(ls), local_rows, starts[s:e + 1] - starts[s], readonly(xs), local_fronts,
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
    empty); one pass for all segments rather than an argmax a segment."""
    peaks = np.maximum.reduceat(values, starts[:-1])
    at = np.where(values == np.repeat(peaks, np.diff(starts)), np.arange(values.size), values.size)
    return np.minimum.reduceat(at, starts[:-1])


def _pair_edges(x: np.ndarray, groups: list[np.ndarray], centres: np.ndarray, pairs: list[tuple[int, int]],
                per_row: int = 0, settings: JoinSettings = DEFAULT_SETTINGS
                ) -> tuple[list[tuple[int, int, float]], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The best edge (i in the first component, j in the second, similarity) of each pair of
    components, in the order of ``pairs``, and the spare edges: every searched row's best
    ``per_row`` edges into the component it was searched against (src the searched row).

    A small side (at most ``settings.small_side`` rows) is searched against the other side whole
    where it has at most ``settings.reach`` rows, else against its ``reach`` rows nearest the small
    side's centre. Another pair is searched over all its member pairs (``settings.whole``) as the
    smaller side's rows against the larger side; a pair of large sides as each side's
    ``settings.frontier`` rows nearest the other side's centre against the whole other side (two
    products of frontier x size instead of one of size x size).

    The frontiers and reaches are found first: in a component of at most ``kernel_side`` rows by
    ``_reach_best`` (the partner's centre against it), in a larger one by a ``_searched`` round
    of ``_nearest_members``. Then the small sides, the reaches and the frontiers facing a
    component of at most ``kernel_side`` rows are searched in one ``_reach_best`` call; the other
    searches against one component, from all its pairs, as one BLAS job of a second
    ``_searched`` round, which gathers the component (in blocks) once a part rather than once a
    pair. Small searches stay out of BLAS rounds, whose Python and threads cost more than their
    products (bench/bench_join.py).
    """
    s = settings
    # Searches by the component searched against: (rows, pair, whether the rows are in its first component).
    searches: dict[int, list[tuple[np.ndarray, int, bool]]] = {}
    facing: dict[int, list[tuple[int, int]]] = {}  # each side of a large pair: component -> (partner, pair)
    reach: dict[int, list[tuple[int, int]]] = {}  # a large component -> (small partner, pair)
    # Searches in ``_reach_best``: (rows, the rows they are searched against, pair, whether the rows are in its first component).
    sides: list[tuple[np.ndarray, np.ndarray, int, bool]] = []
    for p, (g, h) in enumerate(pairs):
        big, small = (g, h) if groups[g].size >= groups[h].size else (h, g)
        if groups[small].size <= s.small_side and groups[big].size <= s.reach:
            sides.append((groups[small], groups[big], p, small == g))
        elif s.whole(groups[g].size, groups[h].size):
            searches.setdefault(big, []).append((groups[small], p, small == g))
        elif groups[small].size <= s.small_side:
            reach.setdefault(big, []).append((small, p))
        else:
            facing.setdefault(g, []).append((h, p))
            facing.setdefault(h, []).append((g, p))
    # The frontiers and reaches: a large component's members nearest each partner's centre; in
    # ``_reach_best`` for a component of at most kernel_side rows, else in a round of BLAS searches.
    kernel = [(g, h, p) for g, partners in facing.items() if groups[g].size <= s.kernel_side for h, p in partners]
    facing = {g: partners for g, partners in facing.items() if groups[g].size > s.kernel_side}
    fronts = _searched(x, [(centres, np.array([h for h, _ in partners]), groups[g], s.frontier) for g, partners in facing.items()]
                       + [(centres, np.array([h for h, _ in partners]), groups[g], s.reach) for g, partners in reach.items()],
                       _nearest_members, s)
    faced = [(g, h, p, front[i]) for (g, partners), (front,) in zip(facing.items(), fronts) for i, (h, p) in enumerate(partners)]
    if kernel:
        ids = _kernel_searched(centres, x, [(np.array([h]), groups[g]) for g, h, _ in kernel], s.frontier)[2]
        faced += [(g, h, p, front[front >= 0]) for (g, h, p), front in zip(kernel, ids)]
    for g, h, p, front in faced:
        if groups[h].size <= s.kernel_side:
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
    found = _searched(x, [(x, rows, groups[target], max(per_row, 1)) for target, rows in searched.items()], settings=s)
    for (target, jobs), (ids, sims) in zip(searches.items(), found):
        take(searched[target], np.cumsum([0] + [r.size for r, _, _ in jobs]), ids, sims, [(p, first) for _, p, first in jobs])
    spare_edges = (np.concatenate([part[0] for part in spare]), np.concatenate([part[1] for part in spare]),
                   np.concatenate([part[2] for part in spare]))
    return [best[p] for p in range(len(pairs))], spare_edges


def component_sums(x: np.ndarray, members: np.ndarray, bounds: np.ndarray, block: int = 65536) -> np.ndarray:
    """The sum of each component's rows, float64 (c, d) (``_component_sums``); float16 rows are
    read as float32 ``block`` members at a time."""
    if x.dtype == np.float32:
        return _component_sums(readonly(x), members, bounds)
    sums = np.zeros((bounds.size - 1, x.shape[1]), np.float64)
    for start in range(0, members.size, block):
        stop = min(start + block, members.size)
        rows = readonly(take(x, members[start:stop]))
        sums += _component_sums(rows, np.arange(stop - start), np.clip(bounds, start, stop) - start)
    return sums


@njit(parallel=True, cache=True)
def _component_sums(x, members, bounds):  # pragma: no cover - compiled
    """The sum of each component's rows, float64 (c, d): component g holds the rows
    ``members[bounds[g]:bounds[g + 1]]``. In parallel over components, faster than scipy's sparse
    indicator product."""
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
    edge of many small ones. Its members are spread, so the mean similarity ranks it low, and
    ranks the small components by topic; nearest centroids alone make one middling component the
    partner of nearly all. Against the best joining tree (every pair of components searched
    whole), the nearest centroid and two highest mean similarities give a heavier tree from fewer
    pairs than three nearest centroids (bench/bench_join.py)."""
    c = sums.shape[0]
    means = (sums / sizes[:, None]).astype(np.float32)
    norms = np.sqrt(np.maximum(np.einsum("ij,ij->i", means, means), 1e-30)).astype(np.float32)
    m = min(candidates, c - 1)
    near = np.empty((c, m + 1), np.int64)
    # Blocks of rows of the c x c similarities, so that memory stays ``block`` entries however many
    # components there are (fine-grained data leaves about one per topic).
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
                    said: Callable[[str, float], None] | None = None, settings: JoinSettings = DEFAULT_SETTINGS
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    the round's seconds; ``settings`` says how far each pair is searched (``JoinSettings``).
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
            centres = normalised(sums).astype(np.float32)
            edges, spare = _pair_edges(x, groups, centres, pairs, per_row, settings)
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
    of more than ``column_block`` rows; a pair of large ones through their frontiers, found and
    searched by ``_reach_best`` in the one of at most ``kernel_side`` rows and by BLAS in the
    other). The kernels read the vectors through read-only views (``rows.readonly``), so one join
    loads them for writable and read-only vectors alike."""
    x = normalised(np.random.default_rng(0).standard_normal((2540, 8)).astype(np.float32))
    join_components(x, np.repeat(np.arange(4), [2300, 130, 100, 10]), candidates=3, per_row=1)
