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

``write_report`` writes the folder: ``report.md`` (a table per size; from three sizes on, the
growth exponents fitted to the largest three and the projected n at which the budgets run out,
with its range and never past ten times the largest size), ``scale.json`` and, with matplotlib
(``chunktree[plot]``), ``time.png`` and ``memory.png`` on log axes.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, integer, number, one_of, require
from chunktree.engine.datasets import SHAPES, synthetic, synthetic_embeddings
from chunktree.engine.results import dumps
from chunktree.files import replacing
from chunktree.kernels.topk import exact_sims_of_rows, recall_of_rows

log = logging.getLogger(__name__)

STAGES = ("kmeans_s", "topk_s", "refine_s", "forest_s", "join_s", "traverse_s")
DEFAULT_SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000)
RECALL_ROWS = 1000
# Above this n the recall is the run's own estimate (``recall_estimate``: 256 rows against their
# exact neighbours among all n) instead of new lists made again for 1,000 rows: making them again
# would double the size's time.
RECALL_REMADE_MAX_N = 2_000_000
DTYPES = ("float32", "float16")
EXACT_WEIGHT_MAX_N = 20_000  # the exact tree holds an n x n float32 matrix
FIT_SIZES = 3  # growth is fitted to the largest this many sizes, and never to fewer
PROJECTION_REACH = 10  # projections go no further than this multiple of the largest n measured
LOW_RECALL = 0.9  # below it the report says why, from the gap between the exact neighbours


@dataclass
class SizeResult:
    """One measured size: stage seconds, peak memory (and the process's own before the data: the
    interpreter and libraries), neighbour recall and tree weight ratio."""

    n: int
    stages: dict[str, float]
    order_s: float
    peak_rss_mb: float
    base_rss_mb: float
    data_mb: float
    recall: float | None = None
    weight_ratio: float | None = None
    components: int | None = None
    neighbour_gap: float | None = None  # mean exact k-th minus 4k-th neighbour similarity of the sampled rows
    stage_peak_mb: dict[str, float] = field(default_factory=dict)  # peak resident memory during each stage
    recall_rows: int = 0  # the rows the recall was measured on


@dataclass
class Sweep:
    """What ``sweep`` measured and why it stopped."""

    source: str
    sizes: list[SizeResult] = field(default_factory=list)
    stopped: str | None = None
    failed: bool = False  # a size did not finish for another reason than a budget
    time_budget_s: float = 0.0
    memory_budget_mb: float = 0.0
    dtype: str = "float32"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fits": fits(self.sizes),
                "projected_n": projected_limits(self.sizes, self.time_budget_s, self.memory_budget_mb)}


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
           "stage_peak_mb": dict(result.memory)}
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


def _power_fit(ns: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """(exponent, log-intercept) of y = a n^b by least squares on logs; None below two points."""
    if len(ns) < 2:
        return None
    b, a = np.polyfit(np.log(ns), np.log(np.maximum(ys, 1e-9)), 1)
    return float(b), float(a)


def fits(sizes: Sequence[SizeResult]) -> dict[str, float | None]:
    """Growth exponents of ordering time, of peak memory above the process's own and of each stage's
    time (``kmeans_exponent``, ...), fitted to the largest ``FIT_SIZES`` sizes (at small n fixed
    costs hide the growth); None below ``FIT_SIZES`` sizes, where two points fit any curve."""
    last = list(sizes)[-FIT_SIZES:]
    enough = len(last) == FIT_SIZES
    ns = [r.n for r in last]
    t, m = _power_fit(ns, [r.order_s for r in last]), _power_fit(ns, [_grown(r) for r in last])
    out: dict[str, float | None] = {"time_exponent": t[0] if t and enough else None,
                                    "memory_exponent": m[0] if m and enough else None}
    for stage in STAGES:
        fit = _power_fit(ns, [max(r.stages[stage], 1e-3) for r in last]) if all(stage in r.stages for r in last) else None
        out[f"{stage.removesuffix('_s')}_exponent"] = fit[0] if fit and enough else None
    return out


def _grown(r: SizeResult) -> float:
    """Peak memory above the process's own: what grows with n."""
    return max(r.peak_rss_mb - r.base_rss_mb, 1.0)


def _project(sizes: Sequence[SizeResult], n: float, key: Callable[[SizeResult], float]) -> float | None:
    """``key`` at ``n`` by the power law through the last three sizes."""
    last = list(sizes)[-3:]
    fit = _power_fit([r.n for r in last], [key(r) for r in last])
    if fit is None:
        return None
    if fit[0] < 0:  # fixed costs falling away at small n: do not project a shrinking cost
        return key(last[-1])
    return float(np.exp(fit[1]) * n ** fit[0])


def _project_memory(sizes: Sequence[SizeResult], n: float) -> float | None:
    grown = _project(sizes, n, _grown)
    return None if grown is None else sizes[-1].base_rss_mb + grown


def projected_limits(sizes: Sequence[SizeResult], time_budget_s: float, memory_budget_mb: float
                     ) -> dict[str, dict[str, Any] | None]:
    """The n at which one ordering run would take ``time_budget_s`` and peak at ``memory_budget_mb``
    (memory: its growth above the process's own), by the power law fitted to the largest
    ``FIT_SIZES`` sizes: ``{"n", "low", "high", "beyond"}`` per budget, where low and high come
    from the growth between each pair of consecutive sizes (the projection's uncertainty) and
    ``beyond`` says that the projection passes ``PROJECTION_REACH`` times the largest n measured, as
    far as a power law fitted to three sizes can be trusted; None below ``FIT_SIZES`` sizes or
    where the cost does not grow."""
    last = list(sizes)[-FIT_SIZES:]
    if len(last) < FIT_SIZES:
        return {"time": None, "memory": None}
    reach = PROJECTION_REACH * last[-1].n
    base = last[-1].base_rss_mb
    out: dict[str, dict[str, Any] | None] = {}
    for name, budget, key in (("time", time_budget_s, lambda r: r.order_s),
                              ("memory", memory_budget_mb - base, _grown)):
        ys = [key(r) for r in last]
        fit = _power_fit([r.n for r in last], ys)
        if fit is None or fit[0] <= 0 or budget <= 0:
            out[name] = None
            continue
        central = float(np.exp((np.log(budget) - fit[1]) / fit[0]))
        ends = []
        for (n0, y0), (n1, y1) in zip(zip([r.n for r in last], ys), zip([r.n for r in last][1:], ys[1:])):
            b = np.log(y1 / y0) / np.log(n1 / n0)
            ends.append(float(n1 * (budget / y1) ** (1 / b)) if b > 0 else float("inf"))
        low, high = min(ends + [central]), max(ends + [central])
        out[name] = {"n": min(central, reach), "low": min(low, reach), "high": min(high, reach),
                     "beyond": central > reach, "high_beyond": high > reach}
    return out


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
        want_t = _project(result.sizes, n, lambda r: r.order_s)
        want_m = _project_memory(result.sizes, n)
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


def _md_table(s: Sweep) -> list[str]:
    head = ["n", *[st.removesuffix("_s") + " s" for st in STAGES], "order s", "peak MB", "data MB", "recall@16",
            "weight / exact", "components"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in s.sizes:
        cells = [f"{r.n:,}", *[f"{r.stages[st]:.2f}" for st in STAGES], f"{r.order_s:.2f}", f"{r.peak_rss_mb:.0f}",
                 f"{r.data_mb:.0f}", "" if r.recall is None else f"{r.recall:.3f}",
                 "" if r.weight_ratio is None else f"{100 * r.weight_ratio:.3f}%", str(r.components)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _memory_table(s: Sweep) -> list[str]:
    """Peak resident MB during each stage (``OrderResult.memory``), where it was measured."""
    stages = ["embed", *[st.removesuffix("_s") for st in STAGES]]
    rows = [r for r in s.sizes if r.stage_peak_mb]
    if not rows:
        return []
    lines = ["| n | " + " | ".join(f"{st} MB" for st in stages) + " |", "|" + "---|" * (len(stages) + 1)]
    for r in rows:
        lines.append(f"| {r.n:,} | " + " | ".join(f"{r.stage_peak_mb.get(st, 0.0):.0f}" for st in stages) + " |")
    return lines


def write_report(s: Sweep, folder: str | os.PathLike[str], plots: bool = True) -> list[Path]:
    """Write ``report.md``, ``scale.json`` and (``plots``) ``time.png``, ``memory.png``; returns the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    doc = s.to_dict()
    f, limits = doc["fits"], doc["projected_n"]

    def exp(v: float | None) -> str:
        return "n/a" if v is None else f"n^{v:.2f}"

    def lim(v: dict[str, Any] | None) -> str:
        if v is None:
            return "n/a (the cost does not grow over the sizes measured)"
        if v["beyond"]:  # a power law fitted to three sizes says nothing this far out
            return f"beyond {PROJECTION_REACH}x the largest size measured (more than {v['n']:,.0f})"
        high = f"more than {v['high']:,.0f}" if v["high_beyond"] else f"{v['high']:,.0f}"
        return f"about {v['n']:,.0f} ({v['low']:,.0f} to {high} by the growth between each pair of sizes)"

    ns = [r.n for r in s.sizes]
    if len(ns) >= FIT_SIZES:
        growth = [
            f"- time grows as {exp(f['time_exponent'])}, peak memory above the process's own "
            f"({s.sizes[-1].base_rss_mb:.0f} MB) as {exp(f['memory_exponent'])} (least squares on logs of the "
            f"largest {FIT_SIZES} sizes, n = {ns[-FIT_SIZES]:,} to {ns[-1]:,})",
            f"- projected n at the time budget ({s.time_budget_s:.0f} s): {lim(limits['time'])}; at the memory "
            f"budget ({s.memory_budget_mb:.0f} MB): {lim(limits['memory'])} (the same power laws, projected no "
            f"further than {PROJECTION_REACH}x the largest size)",
            "- each stage's time grows as " + ", ".join(f"{st.removesuffix('_s')} "
                                                         f"{exp(f[st.removesuffix('_s') + '_exponent'])}"
                                                         for st in STAGES)]
    else:
        growth = [f"- measured n = {', '.join(f'{n:,}' for n in ns) or 'none'}: growth is fitted to at least "
                  f"{FIT_SIZES} sizes (two points fit any curve), so no growth or projection is given; measure "
                  f"more sizes (--sizes) for them"]

    lines = [f"# chunktree scale: {s.source}", "",
             f"Machine: {os.cpu_count()} CPUs, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f}"
             f" GiB. Method: sparse (top-16 graph, forest, joined), default parameters, one run per size, each in a "
             f"fresh process. Peak MB is the process's peak resident memory, data included.", "",
             *_md_table(s), "",
             *(["Peak resident memory during each stage (`embed`: reading and checking the vectors):", "",
                *_memory_table(s), ""] if _memory_table(s) else []),
             *growth,
             f"- recall@16: the share of each of {RECALL_ROWS} sampled rows' exact top-16 its list holds (above "
             f"n = {RECALL_REMADE_MAX_N:,}: the run's own estimate on 256 rows against their exact neighbours among "
             f"all n); weight / exact: the sparse tree's weight over the exact tree's, for n <= {EXACT_WEIGHT_MAX_N:,}"]
    for r in s.sizes:
        if r.recall is not None and r.recall < LOW_RECALL and r.neighbour_gap is not None:
            weight = "" if r.weight_ratio is None else f"; the tree's weight is {100 * r.weight_ratio:.3f}% of the exact tree's"
            lines.append(f"- n={r.n:,}: recall@16 is {r.recall:.3f} because the 16 nearest are barely a set: a sampled "
                         f"chunk's exact 16th and 64th neighbours differ by {r.neighbour_gap:.3f} in cosine on average, so "
                         "which 16 are nearest is close to arbitrary, and the refinement (neighbours of neighbours) has "
                         f"no shared neighbourhoods to follow{weight}")
    if s.stopped:
        lines.append(f"- stopped: {s.stopped}")
    written = [folder / "report.md", folder / "scale.json"]
    for path, content in zip(written, ("\n".join(lines) + "\n", dumps(doc, indent=1))):
        with replacing(path) as f:
            f.write(content)
    if plots and s.sizes:
        written += _plots(s, folder)
    return written


def _plots(s: Sweep, folder: Path) -> list[Path]:
    matplotlib = require("matplotlib", "plot", "the plots of chunktree scale")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def loglog(name: str, what: str, unit: str, total: tuple[str, list[float]],
               parts: list[tuple[str, list[float]]]) -> Path:
        """One log-log figure of ``total`` (solid) and ``parts`` (dashed) against n."""
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.plot(ns, total[1], "o-", color="black", label=total[0])
        for label, ys in parts:
            ax.plot(ns, ys, ".--", label=label)
        ax.set(xscale="log", yscale="log", xlabel="chunks (n)", ylabel=unit, title=f"Ordering {what}: {s.source}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        with replacing(folder / name, "wb") as f:
            fig.savefig(f, format="png", dpi=120)
        plt.close(fig)
        return folder / name

    ns = [r.n for r in s.sizes]
    stages = [(st.removesuffix("_s"), [max(r.stages[st], 1e-3) for r in s.sizes]) for st in STAGES]
    peaks = [(f"during {st.removesuffix('_s')}", [max(r.stage_peak_mb.get(st.removesuffix("_s"), 0.0), 1.0) for r in s.sizes])
             for st in STAGES] if all(r.stage_peak_mb for r in s.sizes) else []
    return [loglog("time.png", "time", "seconds", ("order (total)", [r.order_s for r in s.sizes]), stages),
            loglog("memory.png", "memory", "MB", ("peak resident memory", [r.peak_rss_mb for r in s.sizes]),
                   [(f"the vectors ({s.dtype})", [r.data_mb for r in s.sizes]), *peaks])]
