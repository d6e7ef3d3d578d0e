"""Mini-batch K-means with scikit-learn's estimator conventions.

fit: k-means++ seeding on a sample, mini-batch steps with per-centre learning rates (a centre
moves towards its batch mean by count_in_batch / count_so_far), stopping when the centres barely
move or a smoothed batch inertia stops improving; then ``refine`` full Lloyd passes and one full
assignment for ``labels_`` and ``inertia_``. Every random draw comes from ``random_state``:
the same seed gives the same result.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from chunktree.engine.vectors import check_array, positive_int
from chunktree.kernels.kmeans import assign, center_sums, kmeans_plusplus

log = logging.getLogger(__name__)


class MiniBatchKMeans:
    """Mini-batch K-means on float32 data.

    Parameters
    ----------
    n_clusters : K.
    batch_size : rows per mini-batch step.
    max_steps : at most this many mini-batch steps.
    tol : stop when the squared centre movement of a step is below tol times the data's mean
        per-feature variance (0 disables).
    max_no_improvement : stop after this many steps without a new best smoothed batch inertia.
    refine : full Lloyd passes after the mini-batch phase.
    init_size : rows sampled for k-means++ seeding (default max(3 * batch_size, 3 * K), capped at n).
    random_state : int seed or numpy Generator.

    Attributes (after fit)
    ----------------------
    cluster_centers_ : float32 (K, d). labels_ : int64 (n,). inertia_ : sum of squared distances
    to the nearest centre. n_steps_ : mini-batch steps taken. n_iter_ : passes over the data
    (mini-batch steps as whole passes, plus the Lloyd passes).
    """

    def __init__(self, n_clusters: int = 8, *, batch_size: int = 1024, max_steps: int = 50, tol: float = 1e-4,
                 max_no_improvement: int = 10, refine: int = 1, init_size: int | None = None,
                 n_init: int = 1, random_state: int | np.random.Generator | None = 0) -> None:
        self.n_clusters = n_clusters
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.tol = tol
        self.max_no_improvement = max_no_improvement
        self.refine = refine
        self.init_size = init_size
        self.n_init = n_init
        self.random_state = random_state

    def _check_params(self, n: int) -> None:
        for name in ("n_clusters", "batch_size", "max_steps", "max_no_improvement", "n_init"):
            positive_int(getattr(self, name), name)
        if self.init_size is not None:
            positive_int(self.init_size, "init_size")
        if not isinstance(self.refine, (int, np.integer)) or self.refine < 0:
            raise ValueError(f"refine must be an int >= 0; got {self.refine!r}")
        if not self.tol >= 0:
            raise ValueError(f"tol must be >= 0; got {self.tol!r}")
        if self.n_clusters > n:
            raise ValueError(f"n_clusters must be in [1, n_samples={n}]; got {self.n_clusters}")

    def _rng(self) -> np.random.Generator:
        if isinstance(self.random_state, np.random.Generator):
            return self.random_state
        return np.random.default_rng(self.random_state)

    def _init_centers(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n, k = x.shape[0], self.n_clusters
        size = min(n, self.init_size or max(3 * self.batch_size, 100 * k))
        sample = np.sort(rng.choice(n, size=size, replace=False)) if size < n else np.arange(n)
        xs = x[sample]
        best, best_inertia = None, math.inf
        for _ in range(self.n_init):  # keep the seeding with the lowest inertia on the sample
            centers = xs[kmeans_plusplus(xs, k, rng)]
            inertia = float(assign(xs, centers)[1].sum(dtype=np.float64))
            if inertia < best_inertia:
                best, best_inertia = centers, inertia
        return best.copy()

    def fit(self, X: Any) -> MiniBatchKMeans:
        x = check_array(X)
        n = x.shape[0]
        self._check_params(n)
        rng = self._rng()
        k = self.n_clusters
        centers = self._init_centers(x, rng)
        counts = np.zeros(k, dtype=np.int64)
        batch = min(self.batch_size, n)
        x_sq = np.einsum("ij,ij->i", x, x)
        mean = x.mean(axis=0, dtype=np.float64)
        mean_variance = (float(x_sq.mean(dtype=np.float64)) - float(mean @ mean)) / x.shape[1]
        tol = self.tol * mean_variance
        alpha = min(1.0, 2.0 * batch / (n + 1))
        ewa = best = math.inf
        stale = 0
        steps = 0
        while steps < self.max_steps:
            steps += 1
            idx = rng.integers(0, n, batch)
            xb = x[idx]
            labels, dist_sq = assign(xb, centers, x_sq[idx])
            sums, got = center_sums(xb, labels, k)
            moved = got > 0
            counts[moved] += got[moved]
            update = (sums[moved] - got[moved, None] * centers[moved]) / counts[moved, None]
            centers[moved] += update.astype(np.float32)
            shift = float(np.sum(update * update))
            batch_inertia = float(dist_sq.sum()) / batch
            ewa = batch_inertia if ewa == math.inf else ewa * (1 - alpha) + batch_inertia * alpha
            if tol > 0 and shift <= tol:
                log.debug("mini-batch K-means: centres settled after %d steps", steps)
                break
            if ewa < best:
                best, stale = ewa, 0
            else:
                stale += 1
                if stale >= self.max_no_improvement:
                    log.debug("mini-batch K-means: no improvement for %d steps (step %d)", stale, steps)
                    break
        labels, dist_sq = assign(x, centers, x_sq)
        for _ in range(self.refine):
            centers = self._lloyd_update(x, labels, dist_sq, centers)
            labels, dist_sq = assign(x, centers, x_sq)
        self.cluster_centers_ = centers
        self.labels_ = labels
        self.inertia_ = float(dist_sq.sum(dtype=np.float64))
        self.n_steps_ = steps
        self.n_iter_ = math.ceil(steps * batch / n) + self.refine
        self._counts = counts
        return self

    @staticmethod
    def _lloyd_update(x: np.ndarray, labels: np.ndarray, dist_sq: np.ndarray, centers: np.ndarray) -> np.ndarray:
        """Centres as the means of their rows; an empty centre takes the row farthest from its own."""
        k = centers.shape[0]
        sums, counts = center_sums(x, labels, k)
        new = centers.copy()
        full = counts > 0
        new[full] = (sums[full] / counts[full, None]).astype(np.float32)
        empty = np.flatnonzero(~full)
        if empty.size:
            far = np.argsort(-dist_sq, kind="stable")[:empty.size]
            new[empty] = x[far]
        return new

    def partial_fit(self, X: Any) -> MiniBatchKMeans:
        """One mini-batch step on ``X`` (seeding with k-means++ on ``X`` at the first call)."""
        x = check_array(X)
        if not hasattr(self, "cluster_centers_"):
            self._check_params(x.shape[0])
            rng = self._rng()
            self.cluster_centers_ = x[kmeans_plusplus(x, self.n_clusters, rng)].copy()
            self._counts = np.zeros(self.n_clusters, dtype=np.int64)
            self.n_steps_ = 0
        elif x.shape[1] != self.cluster_centers_.shape[1]:
            raise ValueError(f"X has {x.shape[1]} features; the model was fitted with {self.cluster_centers_.shape[1]}")
        centers, counts = self.cluster_centers_, self._counts
        labels, _ = assign(x, centers)
        sums, got = center_sums(x, labels, self.n_clusters)
        moved = got > 0
        counts[moved] += got[moved]
        centers[moved] += ((sums[moved] - got[moved, None] * centers[moved]) / counts[moved, None]).astype(np.float32)
        self.n_steps_ += 1
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Index of the nearest centre of each row of ``X``."""
        if not hasattr(self, "cluster_centers_"):
            raise ValueError("this MiniBatchKMeans is not fitted yet; call fit or partial_fit first")
        x = check_array(X)
        if x.shape[1] != self.cluster_centers_.shape[1]:
            raise ValueError(f"X has {x.shape[1]} features; the model was fitted with {self.cluster_centers_.shape[1]}")
        return assign(x, self.cluster_centers_)[0]
