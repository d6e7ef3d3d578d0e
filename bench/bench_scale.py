"""How ordering time and memory grow with n, up to ten million chunks: ``chunktree scale``'s sweep
(each size in a fresh process; synthetic vectors of a chosen grain), with the stage times,
the peak memory of the run and of each stage, neighbour recall and the growth exponents.

    python -m pytest bench/bench_scale.py                                   # n = 10k to 1M
    CHUNKTREE_BENCH_SCALE_SIZES=100000,2000000 python -m pytest bench/bench_scale.py
    CHUNKTREE_BENCH_SCALE_SIZES=300000,1000000,10000000 CHUNKTREE_BENCH_SCALE_DTYPE=float16 \
        CHUNKTREE_BENCH_SCALE_TIME_BUDGET=3000 python -m pytest bench/bench_scale.py   # up to 10M

The grain of the synthetic data: ``CHUNKTREE_BENCH_SCALE_SHAPE`` (``text``, the default, or
``topics``) and ``CHUNKTREE_BENCH_SCALE_TOPICS`` (default 100), as ``chunktree scale --shape
--topics``. ``CHUNKTREE_BENCH_SCALE_REPORT_DIR=FOLDER`` also writes ``chunktree scale``'s report and plots there.

The same sweep on your own vectors: ``chunktree scale --embeddings X.npy``. Goals (reported, not
asserted): 1M chunks ordered from embeddings in at most 3 minutes and 3 GB; 10M float16 in at
most 20 minutes and 16 GB.
"""

import os

from conftest import summary

from chunktree.apps.scale import sweep as run_sweep
from chunktree.apps.scale_report import Sweep, write_report

SIZES = [int(s) for s in os.environ.get("CHUNKTREE_BENCH_SCALE_SIZES", "10000,100000,300000,1000000").split(",")]
DTYPE = os.environ.get("CHUNKTREE_BENCH_SCALE_DTYPE", "float32")
# Where to also write chunktree scale's report folder (report.md, scale.json, time.png, memory.png).
REPORT_DIR = os.environ.get("CHUNKTREE_BENCH_SCALE_REPORT_DIR")
TIME_BUDGET_S = float(os.environ.get("CHUNKTREE_BENCH_SCALE_TIME_BUDGET", "900"))
SHAPE = os.environ.get("CHUNKTREE_BENCH_SCALE_SHAPE", "text")
TOPICS = int(os.environ.get("CHUNKTREE_BENCH_SCALE_TOPICS", "100"))


def test_sweep(results):
    swept: Sweep = run_sweep(SIZES, shape=SHAPE, topics=TOPICS, time_budget_s=TIME_BUDGET_S, dtype=DTYPE)
    if REPORT_DIR:
        write_report(swept, REPORT_DIR)
    s = swept.to_dict()
    results["scale"] = {"sizes": s["sizes"], "fits": s["fits"], "stopped": s["stopped"], "dtype": DTYPE,
                        "source": s["source"]}


@summary
def _report(results):
    r = results.get("scale")
    if not r:
        return []
    lines = [f"data: {r['source']}"] if "source" in r else []
    for row in r["sizes"]:
        stages = ", ".join(f"{k} {v:.2f} s" for k, v in row["stages"].items())
        recall = "" if row["recall"] is None else f", recall@16 {row['recall']:.3f} ({row.get('recall_rows', 1000)} rows)"
        lines.append(f"n = {row['n']:,} ({r.get('dtype', 'float32')}): order {row['order_s']:.2f} s ({stages}); peak "
                     f"{row['peak_rss_mb']:,.0f} MB, of which data {row['data_mb']:,.0f} MB{recall}")
        if row.get("stage_peak_mb"):
            lines.append(f"n = {row['n']:,}: peak MB during each stage: "
                         + ", ".join(f"{k} {v:,.0f}" for k, v in row["stage_peak_mb"].items()))
    if r["fits"].get("time_exponent"):
        lines.append(f"time grows as n^{r['fits']['time_exponent']:.2f} over the largest three sizes")
        lines.append("per stage: " + ", ".join(f"{k.removesuffix('_exponent')} n^{v:.2f}" for k, v in r["fits"].items()
                                               if k not in ("time_exponent", "memory_exponent") and v is not None))
    if r["stopped"]:
        lines.append(f"stopped: {r['stopped']}")
    return lines
