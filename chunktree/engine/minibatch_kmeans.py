"""K-means with scikit-learn's estimator conventions, by full Lloyd passes on small data and by
mini-batch steps on large data.

fit: k-means++ seeding on a sample, then either
- Lloyd (up to ``LLOYD_ROWS`` rows, by default): every centre to the mean of its rows, every row to
  its nearest centre, until a pass lowers the inertia by less than ``inertia_tol`` of it; or
- mini-batch steps with per-centre learning rates (a centre moves towards its batch mean by
  count_in_batch / count_so_far), stopping when the centres barely move or a smoothed batch
  inertia stops improving; then ``refine`` full Lloyd passes.
One full assignment gives ``labels_`` and ``inertia_``. Every random draw comes from
``random_state``: the same seed gives the same result.
"""

from __future__ import annotations

import inspect
import logging
import math
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, check_array, integer, number, positive_int
from chunktree.kernels.kmeans import assign, center_sums, kmeans_plusplus

log = logging.getLogger(__name__)

# Rows per centre in one mini-batch step at least: with about one row per centre each step drags
# centres onto single rows and undoes the seeding. Chosen on bench/bench_select.py
# test_many_clusters (n = 100,000 and 1,000,000, K = 1,000; inertia against faiss.Kmeans's).
ROWS_PER_CENTRE = 8
# Rows sampled for k-means++ seeding at most, unless ``init_size`` says otherwise (100 per centre
# below that): seeding is K sequential passes over the sample. Chosen on the same case: time
# against faiss.Kmeans at an inertia within 1% of its.
SEEDING_ROWS = 20_000
# Up to this many rows "auto" runs Lloyd passes, seeded on 30 rows per centre: below it they beat
# the mini-batch path's time at the same inertia, above it they lose (bench/bench_select.py).
LLOYD_ROWS = 50_000
SEEDING_PER_CENTRE = {"lloyd": 30, "minibatch": 100}
ALGORITHMS = ("auto", "lloyd", "minibatch")


class MiniBatchKMeans:
    """K-means on float32 data: Lloyd passes on small data, mini-batch steps on large data.

    Parameters
    ----------
    n_clusters
        K.
    algorithm
        ``"lloyd"``, ``"minibatch"``, or ``"auto"``: Lloyd up to ``LLOYD_ROWS`` rows (50,000),
        mini-batch above.
    max_iter
        Lloyd passes at most.
    inertia_tol
        Lloyd stops when a pass lowers the inertia by less than this fraction of it.
    batch_size
        rows per mini-batch step, at least ``ROWS_PER_CENTRE`` per centre (so for K above
        128 the batch grows with K).
    max_steps
        at most this many mini-batch steps.
    tol
        stop when the squared centre movement of a step is below tol times the data's mean
        per-feature variance (0 disables).
    max_no_improvement
        stop after this many steps without a new best smoothed batch inertia.
    refine
        full Lloyd passes after the mini-batch phase.
    init_size
        rows sampled for k-means++ seeding (default max(3 * batch_size, m * K) with m = 30
        for Lloyd and 100 for mini-batch, m * K at most ``SEEDING_ROWS``; capped at n).
    n_init
        k-means++ seedings tried on that sample; the one with the lowest inertia on the
        sample is kept.
    random_state
        int seed or numpy Generator.

    Attributes
    ----------
    cluster_centers_
        float32 (K, d).
    labels_
        int64, the nearest centre of each row (after ``partial_fit``: of the last batch).
    distances_sq_
        float32 (n,), each row's squared distance to its centre; set by ``fit``.
    inertia_
        sum of squared distances to the nearest centre (after ``partial_fit``: of the
        last batch, as scikit-learn does).
    n_features_in_
        d.
    algorithm_
        ``"lloyd"`` or ``"minibatch"``: the one ``fit`` ran.
    n_steps_
        mini-batch steps taken (0 for Lloyd).
    n_iter_
        passes over the data (mini-batch steps as whole passes, plus the Lloyd passes);
        set by ``fit``.
    """

    def __init__(self, n_clusters: int = 8, *, algorithm: str = "auto", max_iter: int = 50,
                 inertia_tol: float = 1e-3, batch_size: int = 1024, max_steps: int = 50, tol: float = 1e-4,
                 max_no_improvement: int = 10, refine: int = 1, init_size: int | None = None,
                 n_init: int = 1, random_state: int | np.random.Generator | None = 0) -> None:
        self.n_clusters = n_clusters
        self.algorithm = algorithm
        self.max_iter = max_iter
        self.inertia_tol = inertia_tol
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.tol = tol
        self.max_no_improvement = max_no_improvement
        self.refine = refine
        self.init_size = init_size
        self.n_init = n_init
        self.random_state = random_state

    # scikit-learn's estimator protocol: the parameters are exactly __init__'s arguments.
    @classmethod
    def _param_names(cls) -> list[str]:
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The estimator's parameters (``deep`` is accepted for scikit-learn; there are no
        nested estimators)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> MiniBatchKMeans:
        """Set parameters by name; they are checked at the next ``fit``."""
        names = self._param_names()
        for name, value in params.items():
            if name not in names:
                raise InvalidValueError(f"{name!r} is not a parameter of MiniBatchKMeans; valid: {names}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if v is not defaults[k] and v != defaults[k]]
        return f"MiniBatchKMeans({', '.join(changed)})"

    def _check_params(self, n: int) -> None:
        if self.algorithm not in ALGORITHMS:
            raise InvalidValueError(f"algorithm must be one of {list(ALGORITHMS)}; got {self.algorithm!r}")
        for name in ("max_iter", "batch_size", "max_steps", "max_no_improvement", "n_init"):
            positive_int(getattr(self, name), name)
        integer(self.n_clusters, "n_clusters", 1, n, high_name="n_samples")
        if self.init_size is not None:
            positive_int(self.init_size, "init_size")
        integer(self.refine, "refine", 0)
        number(self.tol, "tol", 0.0)
        number(self.inertia_tol, "inertia_tol", 0.0)

    def _check_features(self, x: np.ndarray) -> None:
        if x.shape[1] != self.n_features_in_:
            raise InvalidValueError(f"X has {x.shape[1]} features; the model was fitted with {self.n_features_in_}")

    def _rng(self) -> np.random.Generator:
        if isinstance(self.random_state, np.random.Generator):
            return self.random_state
        return np.random.default_rng(self.random_state)

    def _init_centers(self, x: np.ndarray, rng: np.random.Generator, algorithm: str) -> np.ndarray:
        n, k = x.shape[0], self.n_clusters
        per_centre = SEEDING_PER_CENTRE[algorithm]
        size = min(n, self.init_size or max(3 * self.batch_size, min(per_centre * k, SEEDING_ROWS)))
        sample = np.sort(rng.choice(n, size=size, replace=False)) if size < n else np.arange(n)
        xs = x[sample]
        if self.n_init == 1:
            return xs[kmeans_plusplus(xs, k, rng)]
        best, best_inertia = xs[:0], math.inf
        for _ in range(self.n_init):  # keep the seeding with the lowest inertia on the sample
            centers = xs[kmeans_plusplus(xs, k, rng)]
            inertia = float(assign(xs, centers)[1].sum(dtype=np.float64))
            if inertia < best_inertia:
                best, best_inertia = centers, inertia
        return best.copy()

    @staticmethod
    def _step(xb: np.ndarray, centers: np.ndarray, counts: np.ndarray, xb_sq: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, float]:
        """One mini-batch step, in place: each centre moves towards the mean of its batch rows by
        (rows in batch / rows seen so far). Returns the batch's labels, squared distances, and the
        squared movement of the centres."""
        labels, dist_sq = assign(xb, centers, xb_sq)
        sums, got = center_sums(xb, labels, centers.shape[0])
        moved = got > 0
        counts[moved] += got[moved]
        update = (sums[moved] - got[moved, None] * centers[moved]) / counts[moved, None]
        centers[moved] += update.astype(np.float32)
        return labels, dist_sq, float(np.sum(update * update))

    def fit(self, X: Any) -> MiniBatchKMeans:
        x = check_array(X)
        n = x.shape[0]
        self._check_params(n)
        rng = self._rng()
        algorithm = self.algorithm
        if algorithm == "auto":
            algorithm = "lloyd" if n <= LLOYD_ROWS else "minibatch"
        centers = self._init_centers(x, rng, algorithm)
        x_sq = np.einsum("ij,ij->i", x, x)
        if algorithm == "lloyd":
            centers, labels, dist_sq, passes = self._lloyd(x, x_sq, centers)
            steps = 0
        else:
            centers, labels, dist_sq, steps, passes = self._minibatch(x, x_sq, centers, rng)
        self.cluster_centers_ = centers
        self.labels_ = labels
        self.distances_sq_ = dist_sq
        self.inertia_ = float(dist_sq.sum(dtype=np.float64))
        self.n_features_in_ = x.shape[1]
        self.algorithm_ = algorithm
        self.n_steps_ = steps
        self.n_iter_ = passes
        return self

    def _lloyd(self, x: np.ndarray, x_sq: np.ndarray, centers: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Lloyd passes until one lowers the inertia by less than ``inertia_tol`` of it (or
        ``max_iter``). Returns centres, labels, squared distances and the passes made."""
        labels, dist_sq = assign(x, centers, x_sq)
        inertia = float(dist_sq.sum(dtype=np.float64))
        passes = 0
        while passes < self.max_iter:
            passes += 1
            centers = self._lloyd_update(x, labels, dist_sq, centers)
            labels, dist_sq = assign(x, centers, x_sq)
            previous, inertia = inertia, float(dist_sq.sum(dtype=np.float64))
            if previous - inertia <= self.inertia_tol * inertia:
                break
        log.debug("K-means: %d Lloyd passes", passes)
        self._counts = np.bincount(labels, minlength=self.n_clusters)
        return centers, labels, dist_sq, passes

    def _minibatch(self, x: np.ndarray, x_sq: np.ndarray, centers: np.ndarray, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
        """Mini-batch steps, then ``refine`` Lloyd passes. Returns centres, labels, squared
        distances, the steps taken and the passes over the data."""
        n, k = x.shape[0], self.n_clusters
        counts = np.zeros(k, dtype=np.int64)
        batch = min(max(self.batch_size, ROWS_PER_CENTRE * k), n)
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
            _, dist_sq, shift = self._step(x[idx], centers, counts, x_sq[idx])
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
        self._counts = counts
        return centers, labels, dist_sq, steps, math.ceil(steps * batch / n) + self.refine

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
        """One mini-batch step on ``X`` (seeding with k-means++ on ``X`` at the first call); sets
        ``labels_`` and ``inertia_`` for ``X`` under the updated centres."""
        x = check_array(X)
        if not hasattr(self, "cluster_centers_"):
            self._check_params(x.shape[0])
            self.cluster_centers_ = x[kmeans_plusplus(x, self.n_clusters, self._rng())].copy()
            self.n_features_in_ = x.shape[1]
            self._counts = np.zeros(self.n_clusters, dtype=np.int64)
            self.n_steps_ = 0
        self._check_features(x)
        self._step(x, self.cluster_centers_, self._counts)
        self.labels_, dist_sq = assign(x, self.cluster_centers_)
        self.inertia_ = float(dist_sq.sum(dtype=np.float64))
        self.n_steps_ += 1
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Index of the nearest centre of each row of ``X``."""
        if not hasattr(self, "cluster_centers_"):
            raise InvalidValueError("this MiniBatchKMeans is not fitted yet; call fit or partial_fit first")
        x = check_array(X)
        self._check_features(x)
        return assign(x, self.cluster_centers_)[0]
