"""What ``chunktree scale`` measured and what it projects: each size's result (``SizeResult``),
the sweep's (``Sweep``), the growth fitted to the largest sizes (``fits``), the n at which the
time and memory budgets run out (``projected_limits``, with its range and never past
``PROJECTION_REACH`` times the largest size), and the report folder (``write_report``:
``report.md``, ``scale.json`` and, with matplotlib, ``time.png`` and ``memory.png``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import require
from chunktree.engine.results import dumps
from chunktree.files import replacing

RECALL_ROWS = 1000
# Above this n the recall is the run's own estimate (``recall_estimate``: 256 rows against their
# exact neighbours among all n) instead of new lists made again for 1,000 rows: making them again
# would double the size's time.
RECALL_REMADE_MAX_N = 2_000_000
EXACT_WEIGHT_MAX_N = 20_000  # the exact tree holds an n x n float32 matrix
STAGES = ("kmeans_s", "topk_s", "refine_s", "forest_s", "join_s", "traverse_s")
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


def project(sizes: Sequence[SizeResult], n: float, key: Callable[[SizeResult], float]) -> float | None:
    """``key`` at ``n`` by the power law through the last three sizes."""
    last = list(sizes)[-3:]
    fit = _power_fit([r.n for r in last], [key(r) for r in last])
    if fit is None:
        return None
    if fit[0] < 0:  # fixed costs falling away at small n: do not project a shrinking cost
        return key(last[-1])
    return float(np.exp(fit[1]) * n ** fit[0])


def project_memory(sizes: Sequence[SizeResult], n: float) -> float | None:
    grown = project(sizes, n, _grown)
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
    """Peak resident MB during each stage (``OrderResult.peak_memory_mb``), where it was measured."""
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
