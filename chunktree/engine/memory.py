"""Memory of an ordering run: the peak resident memory of each stage, and the plan checked before
any work.

``StageMeter`` samples this process's resident memory (``/proc/self/statm``, Linux) from a
daemon thread every ``interval`` seconds; ``mark(stage)`` closes a stage and keeps the peak seen
since the previous mark. It reads, never resets, the kernel's counters, so the caller's own
``getrusage`` peak stays valid. Where ``/proc`` is missing it records nothing.

``planned_peak_bytes`` is what the sparse method holds at its fullest, in per-row bytes counted
from its arrays (bench/bench_order_10m.py reports it beside the real peak); ``check_budget``
refuses a run whose plan passes a budget before anything is read.
"""

from __future__ import annotations

import os
import threading

from chunktree.checks import InvalidValueError

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# The process before the data: Python, numpy, Numba's kernels, OpenVINO, with room to spare.
PROCESS_BYTES = 512 * 2**20


def resident_bytes() -> int | None:
    """This process's resident memory now, or None where ``/proc`` is missing."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class StageMeter:
    """Peak resident memory per stage, in MB (``peaks``), sampled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.05) -> None:
        self.peaks: dict[str, float] = {}
        self._interval = interval
        self._peak = resident_bytes()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if self._peak is not None:
            self._thread = threading.Thread(target=self._sample, name="chunktree-stage-meter", daemon=True)
            self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(self._interval):
            now = resident_bytes() or 0
            with self._lock:
                self._peak = max(self._peak or 0, now)

    def mark(self, stage: str) -> None:
        """Close ``stage``: its peak is the highest sample since the previous mark (or the start)."""
        if self._peak is None:
            return
        now = resident_bytes() or 0
        with self._lock:
            self.peaks[stage] = max(self._peak, now) / 2**20
            self._peak = now

    def close(self) -> dict[str, float]:
        """Stop sampling; the peaks marked so far."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        return dict(self.peaks)

    def __enter__(self) -> StageMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def planned_peak_bytes(n: int, d: int, itemsize: int, k: int, probes: int, copied: bool) -> int:
    """The sparse method's largest working set for ``n`` rows of ``d`` dims: the vectors (read
    whole: a memory-mapped file ends up resident), a normalised copy when ``copied``, and the
    largest stage's arrays per row: the forest's edge list (source, target, sort keys and their
    order: 8 bytes each per edge, ``k`` edges a row) beside the neighbour lists (12 bytes an
    entry), which outweighs the search's (lists, uint16 probe lists, the inverted file) and a
    refinement pass's (int32 graph rows of ``k`` + 8 entries, two of them, and new lists), and
    ``PROCESS_BYTES`` for the interpreter and libraries."""
    data = n * d * itemsize * (2 if copied else 1) + PROCESS_BYTES
    lists = n * k * 12
    search = n * probes * 2 + n * 8
    refine = 2 * n * (k + 8) * 4 + n * (k + 8) + lists
    forest = n * k * 32
    return data + lists + max(search, refine, forest) + n * 64  # + per-row results: order, parent, weights, labels


def check_budget(planned: int, budget_mb: float | None, what: str) -> None:
    """Refuse before any work when ``planned`` bytes pass ``budget_mb``."""
    if budget_mb is not None and planned > budget_mb * 2**20:
        raise InvalidValueError(f"{what} needs about {planned / 2**30:.1f} GiB at its peak, more than the memory budget "
                                f"of {budget_mb / 1024:.1f} GiB ({budget_mb:,.0f} MB); raise the budget, or order fewer "
                                "chunks (float16 vectors take half the memory of float32)")
