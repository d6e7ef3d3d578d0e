"""How ordering time and memory grow with n, up to a million chunks: ``chunktree scale``'s sweep
(each size in a fresh process; synthetic embedding-like vectors, 100 topics), with the stage times,
peak memory, neighbour recall and the growth exponent.

    python -m pytest bench/bench_scale.py                                   # n = 10k to 1M
    CHUNKTREE_BENCH_SCALE_SIZES=100000,2000000 python -m pytest bench/bench_scale.py

The same sweep on your own vectors: ``chunktree scale --embeddings X.npy``. Goal (reported, not
asserted): 1M chunks ordered from embeddings in at most 3 minutes and 3 GB.
"""

import os

from conftest import summary

from chunktree.engine.scale import sweep

SIZES = [int(s) for s in os.environ.get("CHUNKTREE_BENCH_SCALE_SIZES", "10000,100000,300000,1000000").split(",")]


def test_sweep(results):
    s = sweep(SIZES, time_budget_s=900).to_dict()
    results["scale"] = {"sizes": s["sizes"], "fits": s["fits"], "stopped": s["stopped"]}


@summary
def _report(results):
    r = results.get("scale")
    if not r:
        return []
    lines = []
    for row in r["sizes"]:
        stages = ", ".join(f"{k} {v:.2f} s" for k, v in row["stages"].items())
        recall = "" if row["recall"] is None else f", recall@16 {row['recall']:.3f}"
        lines.append(f"n = {row['n']:,}: order {row['order_s']:.2f} s ({stages}); peak {row['peak_rss_mb']:,.0f} MB, "
                     f"of which data {row['data_mb']:,.0f} MB{recall}")
    if r["fits"].get("time_exponent"):
        lines.append(f"time grows as n^{r['fits']['time_exponent']:.2f} over the largest three sizes")
    if r["stopped"]:
        lines.append(f"stopped: {r['stopped']}")
    return lines
