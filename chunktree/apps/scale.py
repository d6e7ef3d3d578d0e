"""Scale limits: how ordering's time and memory grow with n, measured on this machine.

``sweep`` orders, for each n of a list, synthetic vectors of a chosen grain (``synthetic``:
text-like vectors in a few large topics, or many small distinct topics) or a random subsample of
the user's own embeddings, each size in a fresh child process so that its peak memory is its own.
Per size it records the seconds of every stage of the sparse method (K-means, top-K, refinement,
forest, joining, traversal), the peak resident memory, recall@16 of the neighbour lists on sampled
rows against exact neighbours, and the tree weight against the exact tree where the exact tree is
affordable. Before each size it projects the time and memory from the sizes measured so far (a
power law fitted to the last three) and stops cleanly when the projection passes the budget, or
when the data alone would pass the memory budget. The child is watched while it runs: it is
stopped when its resident memory passes the memory budget (read from ``/proc``, on Linux)
or when it runs past twice the time budget and a minute (the data and the checks take time too). A
child that fails sends its error back; ``Sweep.failed`` says so and the command exits non-zero.

``scale_report`` fits the growth, projects the limits and writes the report folder.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chunktree.apps.scale_report import (
    EXACT_WEIGHT_MAX_N,
    RECALL_REMADE_MAX_N,
    RECALL_ROWS,
    STAGES,
    SizeResult,
    Sweep,
    project,
    project_memory,
)
from chunktree.checks import InvalidValueError, integer, number, one_of
from chunktree.engine.datasets import SHAPES, synthetic, synthetic_embeddings
from chunktree.kernels.topk import exact_sims_of_rows, recall_of_rows

log = logging.getLogger(__name__)

DEFAULT_SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000)
DTYPES = ("float32", "float16")


def _recall(x: np.ndarray, k: int, n_clusters: int, probes: int, seed: int) -> tuple[float, float]:
    """Recall@k of the sparse method's lists on ``RECALL_ROWS`` sampled rows (other rows than the
    method's own estimate uses) against their exact neighbours, and how far apart the exact k-th
    and 4k-th neighbours are (the mean gap in similarity: near 0, the k nearest are not a
    well-defined set). The lists are made again with the same parameters and seed: they are the
    lists ``order()`` used."""
    from chunktree.engine.order import sparse_neighbours

    n = x.shape[0]
    _, sims = sparse_neighbours(x, k, n_clusters, probes, seed)
    rows = np.sort(np.random.default_rng(seed + 1).choice(n, min(RECALL_ROWS, n), replace=False))
    exact = exact_sims_of_rows(x, rows, min(4 * k, n - 1))
    gap = float(np.mean(exact[:, k - 1] - exact[:, -1]))
    return recall_of_rows(sims[rows], exact[:, :k]), gap


def _measure(n: int, embeddings: str | None, shape: str, topics: int, seed: int, dtype: str, out: Any) -> None:
    """Child process: make or load the data, order it, measure; send a dict through ``out``, or
    ``{"error": ...}`` when that fails."""
    try:
        out.send(_measured(n, embeddings, shape, topics, seed, dtype))
    except Exception as exc:  # the parent reports it; the traceback stays in the child's stderr
        out.send({"error": f"{type(exc).__name__}: {exc}"})
        raise


def _measured(n: int, embeddings: str | None, shape: str, topics: int, seed: int, dtype: str) -> dict[str, Any]:
    from chunktree.checks import unit_rows
    from chunktree.engine.order import RECALL_SAMPLE, order
    from chunktree.kernels.join import load_kernels

    # Load the compiled kernels first: an ordering's, and the join's (some of which no ordering of
    # 500 rows reaches).
    order(synthetic_embeddings(500, topics=20, seed=1), method="sparse")
    load_kernels()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    if embeddings is None:
        x = synthetic(n, shape, topics, seed=seed + n, out=np.empty((n, 384), dtype=dtype))
    else:
        source = np.load(embeddings, mmap_mode="r")
        rows = np.arange(n) if n == source.shape[0] else np.sort(
            np.random.default_rng(seed).choice(source.shape[0], n, replace=False))
        x = unit_rows(source[rows], "embeddings", keep_float16=True).astype(dtype, copy=False)
    t = time.perf_counter()
    result = order(x, method="sparse", seed=seed)
    order_s = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    p = result.params
    row = {"n": n, "stages": {s: result.timings.get(s, 0.0) for s in STAGES}, "order_s": order_s,
           "peak_rss_mb": peak, "base_rss_mb": base, "data_mb": x.nbytes / 2**20, "components": p["forest_components"],
           "stage_peak_mb": dict(result.peak_memory_mb)}
    if n <= RECALL_REMADE_MAX_N:
        row.update(zip(("recall", "neighbour_gap"), _recall(x, p["k"], p["n_clusters"], p["probes"], seed)),
                   recall_rows=min(RECALL_ROWS, n))
    else:
        row.update(recall=p["recall_estimate"], recall_rows=min(RECALL_SAMPLE, n))
    if n <= EXACT_WEIGHT_MAX_N:
        row["weight_ratio"] = result.tree_weight / order(x, method="exact").tree_weight
    return row


def _rss_mb(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MB, from ``/proc`` (None where there is none)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def _watch(child: Any, receive: Any, n: int, time_limit_s: float, memory_budget_mb: float
           ) -> tuple[dict[str, Any] | None, str | None, bool]:
    """Wait for the child's row while watching its memory and time: (row, None, False), or (None,
    why it was stopped, whether it failed for another reason than a budget)."""
    t0 = time.perf_counter()
    peak = 0.0
    while not receive.poll(0.05):
        rss = _rss_mb(child.pid) or 0.0
        peak = max(peak, rss)
        if rss > memory_budget_mb:
            child.kill()
            child.join()
            return None, f"n={n:,} stopped at {rss:.0f} MB resident, past the memory budget {memory_budget_mb:.0f} MB", False
        if time.perf_counter() - t0 > time_limit_s:
            child.kill()
            child.join()
            return None, f"n={n:,} stopped after {time.perf_counter() - t0:.0f} s (past twice the time budget)", False
        if not child.is_alive() and not receive.poll(0):
            break
    try:
        row = receive.recv()
    except EOFError:
        child.join()
        return None, (f"n={n:,}: the measuring process died (exit code {child.exitcode}; last seen at "
                      f"{peak:.0f} MB resident: out of memory?)"), True
    child.join()
    if "error" in row:
        return None, f"n={n:,}: the measuring process failed: {row['error']}", True
    return row, None, False


def sweep(sizes: Sequence[int] = DEFAULT_SIZES, *, embeddings: str | os.PathLike[str] | None = None,
          shape: str = "text", topics: int = 100, seed: int = 0, time_budget_s: float = 600.0,
          memory_budget_mb: float | None = None,
          dtype: str = "float32", say: Callable[[str], None] = log.info) -> Sweep:
    """Measure ordering at each of ``sizes`` (ascending), each in a fresh child process.

    Parameters
    ----------
    embeddings
        a ``.npy`` of the user's own vectors (float16/32/64, memory-mapped), subsampled
        to each size; sizes above its row count are dropped. Default: synthetic vectors
        (``synthetic``) of ``shape`` in ``topics`` topics: the grain of the data, from a few
        large topics to many small ones.
    time_budget_s
        the longest one ordering run may take; a size projected past it is not run.
    memory_budget_mb
        the most one run may hold; default three quarters of this machine's memory.
    dtype
        ``"float32"`` or ``"float16"``: the vectors as ordered (float16 is kept as float16: half
        the memory, as a float16 ``.npy`` of ``chunktree order --embeddings``).
    say
        where progress lines go (default: this module's logger, at INFO).
    """
    sizes = sorted({integer(n, "sizes (chunk counts)", 100) for n in sizes})
    if not sizes:
        raise InvalidValueError("sizes must name at least one n")
    number(time_budget_s, "time_budget_s", 0.0, low_open=True)
    if memory_budget_mb is None:
        memory_budget_mb = 0.75 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    number(memory_budget_mb, "memory_budget_mb", 0.0, low_open=True)
    integer(topics, "topics", 1)
    one_of(shape, "shape", SHAPES)
    one_of(dtype, "dtype", DTYPES)
    source, dim = f"synthetic ({shape}), {topics:,} topics, {dtype}", 384
    if embeddings is not None:
        try:
            given = np.load(embeddings, mmap_mode="r").shape
        except (OSError, ValueError) as exc:
            raise InvalidValueError(f"embeddings {embeddings}: not a readable .npy file ({exc})") from None
        if len(given) != 2:
            raise InvalidValueError(f"embeddings {embeddings}: must be a 2-d array (chunks x dims); got shape {given}")
        rows, dim = given
        dropped = [n for n in sizes if n > rows]
        if dropped:
            say(f"scale: {embeddings} has {rows} rows; sizes {dropped} left out")
        sizes = [n for n in sizes if n <= rows]
        if not sizes:
            raise InvalidValueError(f"embeddings {embeddings} has {rows} rows, fewer than every size")
        source, embeddings = f"{embeddings} (random subsamples, {dtype})", os.fspath(embeddings)
    result = Sweep(source, time_budget_s=time_budget_s, memory_budget_mb=memory_budget_mb, dtype=dtype)
    context = multiprocessing.get_context("spawn")
    for n in sizes:
        want_t = project(result.sizes, n, lambda r: r.order_s)
        want_m = project_memory(result.sizes, n)
        data_mb = n * dim * np.dtype(dtype).itemsize / 2**20
        if want_t is not None and want_t > time_budget_s:
            result.stopped = f"n={n:,} left out: projected {want_t:.3g} s > time budget {time_budget_s:.3g} s"
        elif want_m is not None and want_m > memory_budget_mb:
            result.stopped = (f"n={n:,} left out: projected {want_m:.0f} MB > memory budget "
                              f"{memory_budget_mb:.0f} MB")
        elif data_mb > memory_budget_mb:
            result.stopped = (f"n={n:,} left out: its vectors alone take {data_mb:,.0f} MB > memory budget "
                              f"{memory_budget_mb:.0f} MB")
        if result.stopped:
            say(f"scale: {result.stopped}")
            break
        guess = "" if want_t is None else f" (projected {want_t:.0f} s, {want_m:.0f} MB)"
        say(f"scale: n={n:,}: ordering{guess} ...")
        t0 = time.perf_counter()
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_measure, args=(n, embeddings, shape, topics, seed, dtype, send), daemon=True)
        child.start()
        send.close()
        got, why, result.failed = _watch(child, receive, n, 2 * time_budget_s + 60, memory_budget_mb)
        if got is None:
            result.stopped = why
            say(f"scale: {result.stopped}")
            break
        row = SizeResult(**got)
        result.sizes.append(row)
        say(f"scale: n={n:,}: order {row.order_s:.2f} s, peak {row.peak_rss_mb:.0f} MB, recall@16 {row.recall:.3f}"
            f" ({time.perf_counter() - t0:.0f} s with data and checks)")
    return result
