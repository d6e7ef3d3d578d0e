"""Means with 95% bootstrap confidence intervals over questions, and paired differences."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

RESAMPLES = 2000


def bootstrap(values: Sequence[float] | np.ndarray, *, seed: int = 0, resamples: int = RESAMPLES) -> dict[str, float]:
    """Mean of ``values`` and its 95% percentile-bootstrap interval (resampling the questions).

    The same ``seed`` and length draw the same resamples, so intervals of paired differences
    (``bootstrap(a - b)``) and of the means themselves come from one set of draws.
    """
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    rng = np.random.default_rng([seed, a.size])
    means = np.empty(resamples)
    step = max(1, 2_000_000 // a.size)  # resamples per block: bounded memory
    for start in range(0, resamples, step):
        stop = min(start + step, resamples)
        means[start:stop] = a[rng.integers(0, a.size, (stop - start, a.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"mean": float(a.mean()), "lo": float(lo), "hi": float(hi), "n": int(a.size)}
