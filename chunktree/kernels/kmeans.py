"""K-means pieces: k-means++ seeding, nearest-centre assignment, centre sums.

Distances go through BLAS: for rows x and centres c, ||x - c||^2 = ||x||^2 - 2 x.c + ||c||^2,
with x.c one matrix product per block of rows. ``spherical_kmeans`` (the centres of ``order``'s
search, by cosine) finds each row's nearest centre as the search's probe lists do
(``topk.probe_lists``, on the CPU's bf16 units when asked). Numba does the per-row loop BLAS
cannot: the per-centre sums of an assignment. It runs serially: a Numba parallel region per
mini-batch step, against BLAS's own threads, costs more than the whole step's work.
"""

from collections.abc import Callable

import numpy as np
from numba import njit

from chunktree.checks import normalised
from chunktree.kernels.topk import probe_lists

DEFAULT_BLOCK = 4096


def assign(x: np.ndarray, centers: np.ndarray, x_sq: np.ndarray | None = None,
           block: int = DEFAULT_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centre of every row.

    Parameters
    ----------
    x
        float32 (n, d), C-contiguous.
    centers
        float32 (k, d).
    x_sq
        optional float32 (n,) squared row norms of ``x``.

    Returns
    -------
    labels
        int64 (n,), the nearest centre (ties to the lower index).
    dist_sq
        float32 (n,), squared Euclidean distance to it (clipped at 0).
    """
    n = x.shape[0]
    c_sq = np.einsum("ij,ij->i", centers, centers)
    if x_sq is None:
        x_sq = np.einsum("ij,ij->i", x, x)
    labels = np.empty(n, dtype=np.int64)
    dist_sq = np.empty(n, dtype=np.float32)
    for start in range(0, n, block):
        stop = min(start + block, n)
        d = x[start:stop] @ centers.T
        d *= -2.0
        d += c_sq
        lab = np.argmin(d, axis=1)
        labels[start:stop] = lab
        dist_sq[start:stop] = np.maximum(d[np.arange(stop - start), lab] + x_sq[start:stop], 0.0)
    return labels, dist_sq


@njit(cache=True)  # no fixed signature: x may be a read-only view (a memory-mapped .npy)
def center_sums(x, labels, k):  # pragma: no cover - compiled
    """Per-centre sum of the rows assigned to it (float64) and their count."""
    n, d = x.shape
    sums = np.zeros((k, d))
    counts = np.zeros(k, dtype=np.int64)
    for i in range(n):
        c = labels[i]
        counts[c] += 1
        for j in range(d):
            sums[c, j] += x[i, j]
    return sums, counts


def kmeans_plusplus(x: np.ndarray, k: int, rng: np.random.Generator,
                    n_local_trials: int | None = None) -> np.ndarray:
    """Greedy k-means++ seeding: ``k`` distinct row indices of ``x``.

    Each new centre is the best (lowest resulting potential) of ``n_local_trials`` candidates
    drawn with probability proportional to the squared distance to the nearest centre so far
    (default 2 + log k, as in scikit-learn). Rows identical to a chosen centre have distance 0
    and are never drawn while any other row remains; only when fewer than ``k`` distinct rows
    exist are the rest filled with unchosen duplicates.
    """
    n = x.shape[0]
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(k))
    x_sq = np.einsum("ij,ij->i", x, x)
    chosen = np.empty(k, dtype=np.int64)
    chosen[0] = rng.integers(n)
    closest = np.maximum(x_sq - 2.0 * (x @ x[chosen[0]]) + x_sq[chosen[0]], 0.0).astype(np.float32)
    closest[chosen[0]] = 0.0
    for c in range(1, k):
        cumulative = np.cumsum(closest, dtype=np.float64)
        potential = cumulative[-1]
        if potential <= 0.0:  # every remaining row duplicates a centre
            rest = np.setdiff1d(np.arange(n), chosen[:c])
            chosen[c:] = rng.choice(rest, size=k - c, replace=False)
            break
        candidates = np.minimum(np.searchsorted(cumulative, rng.random(n_local_trials) * potential, side="right"),
                                n - 1)
        d = x @ x[candidates].T
        d *= -2.0
        d += x_sq[:, None]
        d += x_sq[candidates]
        np.maximum(d, 0.0, out=d)
        np.minimum(d, closest[:, None], out=d)
        best = int(np.argmin(d.sum(axis=0, dtype=np.float64)))
        chosen[c] = candidates[best]
        closest = np.ascontiguousarray(d[:, best])
        closest[chosen[:c + 1]] = 0.0
    return chosen


def spherical_kmeans(x: np.ndarray, k: int, seed: int = 0, iters: int = 10,
                     points_per_centre: int = 64, bf16: bool = False,
                     done: Callable[[int], None] | None = None) -> np.ndarray:
    """float32 (k, d) unit centres of unit rows ``x``: Lloyd iterations by cosine on a sample of
    at most ``points_per_centre * k`` rows, starting from ``k`` distinct sampled rows. A centre
    that loses every row keeps its place. Each iteration finds every row's nearest centre as the
    top-K search's probe lists do (``topk.probe_lists`` with one probe, on the bf16 units with
    ``bf16``) and sums the rows of each centre (``center_sums``); ``done`` (when given) is called
    with 1 after each iteration."""
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    sample = np.sort(rng.choice(n, min(n, points_per_centre * k), replace=False))
    xs = np.ascontiguousarray(x[sample], dtype=np.float32)
    centers = xs[rng.choice(xs.shape[0], k, replace=False)].copy()
    for _ in range(iters):
        labels = probe_lists(xs, centers, 1, bf16=bf16)[:, 0]
        sums, counts = center_sums(xs, labels, k)
        moved = (counts > 0) & sums.any(axis=1)
        centers[moved] = normalised(sums[moved]).astype(np.float32)
        if done is not None:
            done(1)
    return centers
