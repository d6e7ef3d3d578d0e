"""Ten million embedded chunks ordered on one box: ``chunktree order --embeddings X.npy`` on
10,000,000 x 384 float16 vectors (7.7 GB on disk), with the wall time, the peak resident memory
of the run and of each of its stages, and the recall of its neighbour lists.

    python -m pytest bench/bench_order_10m.py                                    # n = 10,000,000
    CHUNKTREE_BENCH_LARGE_N=2000000 python -m pytest bench/bench_order_10m.py    # any n
    CHUNKTREE_BENCH_LARGE_SHAPE=topics CHUNKTREE_BENCH_LARGE_TOPICS=100000 \
        python -m pytest bench/bench_order_10m.py                                # 100,000 small topics

The grain of the data is a parameter. The vectors are ``chunktree.apps.scale.synthetic`` of
``CHUNKTREE_BENCH_LARGE_SHAPE`` in ``CHUNKTREE_BENCH_LARGE_TOPICS`` topics: by default ``text``,
100 topics of 20 sub-topics shaped like all-MiniLM-L6-v2 embeddings of real text (a few large
topics); ``topics`` with 100,000 topics makes many small ones, about 100 rows each at 10M. They
are written block by block as float16 into ``CHUNKTREE_BENCH_LARGE_DIR`` (default: the system's
temporary folder) and kept there for the next run. Making 10M takes a few minutes and 7.7 GB of
disk.

1. ``order``: the command in a child process, writing every row as JSON Lines (``-o
   ROWS.jsonl``, 2.2 GB at 10M, removed after) and the result's head on stdout; its wall time and
   peak resident memory (the kernel's count for the child, ``getrusage``) against the plan it
   printed before starting, the stage seconds and per-stage peaks it reports (``timings``,
   ``memory_mb``), whether the order is a permutation of all rows and the file holds a row for
   each, and the time it projected from its first block of rows.
2. ``ray``: the same command with ``--ray local`` (a Ray cluster on this machine; the probe lists
   and the search as Ray tasks): its wall time, and whether its order, root and tree weight are
   those of (1) (or, when (1) is left out with ``CHUNKTREE_BENCH_LARGE_SINGLE=0``, of the newest
   single-process run in the results files). ``CHUNKTREE_BENCH_LARGE_RAY=0`` leaves it out.
3. ``recall``: recall@16 of the sparse method's lists against the exact top-16 on a sample of
   100,000 of the same vectors, the first 100,000 rows (the rows are made a block at a time, so
   this keeps the grain: whole topics), every row against its exact top-16, beside the run's own
   estimate (``recall_estimate``: 256 rows against their exact neighbours among all n).

Goal (reported, not asserted): 10M in at most 20 minutes and 16 GB.
"""

import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import summary

from chunktree.engine.datasets import synthetic
from chunktree.engine.order import DEFAULT_K, DEFAULT_PROBES, sparse_neighbours
from chunktree.kernels.topk import recall_of_rows, topk_exact

N = int(os.environ.get("CHUNKTREE_BENCH_LARGE_N", "10000000"))
FOLDER = Path(os.environ.get("CHUNKTREE_BENCH_LARGE_DIR", tempfile.gettempdir()))
SAMPLE = 100_000
GOAL_S, GOAL_GB = 20 * 60, 16
RAY = os.environ.get("CHUNKTREE_BENCH_LARGE_RAY", "1") != "0"
SINGLE = os.environ.get("CHUNKTREE_BENCH_LARGE_SINGLE", "1") != "0"
SHAPE = os.environ.get("CHUNKTREE_BENCH_LARGE_SHAPE", "text")
TOPICS = int(os.environ.get("CHUNKTREE_BENCH_LARGE_TOPICS", "100"))
DEFAULT_GRAIN = (SHAPE, TOPICS) == ("text", 100)  # the suite's first grain: its results and files keep their names
CASE = f"n={N}" if DEFAULT_GRAIN else f"n={N}, {SHAPE}, {TOPICS} topics"


def vectors_file(n: int, seed: int = 0) -> Path:
    """The float16 vectors of size n: made once, then reused (a partial file is never taken)."""
    grain = "" if DEFAULT_GRAIN else f"-{SHAPE}{TOPICS}"
    path = FOLDER / f"chunktree-bench-{n}{grain}-f16-seed{seed}.npy"
    if path.exists():
        return path
    partial = path.with_suffix(".partial.npy")
    x = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float16, shape=(n, 384))
    synthetic(n, SHAPE, TOPICS, seed=seed, out=x)
    x.flush()
    del x
    partial.rename(path)
    return path


def _order(path: Path, *more: str) -> tuple[float, dict, str, int]:
    """``chunktree order --embeddings path --format json --top 1 -o ROWS.jsonl`` in a child
    process: (wall seconds, the JSON result, stderr, the rows of the JSON Lines file)."""
    rows = FOLDER / "chunktree-bench-order.jsonl"
    command = [sys.executable, "-m", "chunktree", "order", "--embeddings", str(path), "--format", "json", "--top", "1",
               "-o", str(rows), "--force", *more]
    env = {**os.environ, "CHUNKTREE_PROGRESS_SECONDS": "30"}
    log = FOLDER / "chunktree-bench-order.log"  # the progress as it comes: tail -f it
    t = time.perf_counter()
    with log.open("w") as err:
        run = subprocess.run(command, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    wall = time.perf_counter() - t
    stderr = log.read_text()
    assert run.returncode == 0, stderr[-3000:]
    with rows.open("rb") as f:
        lines = sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 24), b""))
    rows.unlink()
    return wall, json.loads(run.stdout), stderr, lines


def _digest(doc: dict) -> str:
    return hashlib.sha256(np.asarray(doc["order"], dtype=np.int64).tobytes()).hexdigest()


@pytest.mark.skipif(not SINGLE, reason="CHUNKTREE_BENCH_LARGE_SINGLE=0")
def test_order(results):
    t = time.perf_counter()
    path = vectors_file(N)
    made_s = time.perf_counter() - t
    wall, doc, err, lines = _order(path)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # kB on Linux; the only child so far
    plan = re.search(r"planned peak memory about ([\d.]+) GiB", err)
    projected = re.search(r"projected from the first ([\d,]+) rows: the search ([\d,]+) s", err)
    results["order"][CASE] = {
        "n": N, "shape": SHAPE, "topics": TOPICS, "wall_s": wall,
        "permutation": bool(np.array_equal(np.sort(np.asarray(doc["order"])), np.arange(N))), "jsonl_rows": lines,
        "peak_rss_mb": peak_mb, "vectors": str(path), "vectors_made_s": made_s,
        "stages_s": doc["timings"], "stages_peak_mb": doc["memory_mb"], "params": doc["params"],
        "root": doc["root"], "tree_weight": doc["tree_weight"], "order_sha256": _digest(doc),
        "planned_peak_gib": float(plan.group(1)) if plan else None,
        "projected_search_s": float(projected.group(2).replace(",", "")) if projected else None,
        "projected_after_rows": int(projected.group(1).replace(",", "")) if projected else None,
        "stderr_tail": err[-2000:]}


def _single_process_run() -> dict | None:
    """This suite's single-process row of size N from its results files (a run without Ray, or the
    single-process part of a full run), the newest first."""
    found = []
    for path in (Path(__file__).parent / "results").glob("bench_order_10m*.json"):
        doc = json.loads(path.read_text())
        row = doc["results"].get("order", {}).get(CASE)
        if row and "order_sha256" in row:
            found.append((doc["date"], {**row, "from": f"{path.name} ({doc['date']}, commit {doc['commit'][:10]})"}))
    return max(found, key=lambda f: f[0])[1] if found else None


@pytest.mark.skipif(not RAY, reason="CHUNKTREE_BENCH_LARGE_RAY=0")
def test_ray(results):
    """Compared with this session's single-process run, or else with the newest one of the results
    files (``CHUNKTREE_BENCH_LARGE_SINGLE=0`` leaves the single-process run out of this session)."""
    pytest.importorskip("ray")
    single = results["order"].get(CASE) or _single_process_run()
    wall, doc, err, _ = _order(vectors_file(N), "--ray", "local")
    results["ray"][CASE] = {
        "n": N, "wall_s": wall, "stages_s": doc["timings"], "root": doc["root"], "tree_weight": doc["tree_weight"],
        "order_sha256": _digest(doc), "stderr_tail": err[-2000:],
        "compared_with": None if single is None else single.get("from", "this run"),
        "same_as_single_process": None if single is None else (
            _digest(doc) == single["order_sha256"] and doc["root"] == single["root"]
            and doc["tree_weight"] == single["tree_weight"])}


def test_recall(results):
    x = np.load(vectors_file(N), mmap_mode="r")
    sample = np.asarray(x[:SAMPLE], dtype=np.float32)
    n = sample.shape[0]
    _, sims = sparse_neighbours(sample, DEFAULT_K, round(2 * np.sqrt(n)), DEFAULT_PROBES, seed=0)
    _, exact = topk_exact(sample, DEFAULT_K)
    results["recall"][f"sample={n}"] = {"n": n, "shape": SHAPE, "topics": TOPICS, "recall": recall_of_rows(sims, exact)}


@summary
def _report(results):
    lines = []
    for row in results.get("order", {}).values():
        gib, gb = row["peak_rss_mb"] / 1024, row["peak_rss_mb"] * 2**20 / 1e9
        stages = ", ".join(f"{k.removesuffix('_s')} {v:.0f} s / {row['stages_peak_mb'].get(k.removesuffix('_s'), 0) / 1024:.1f} GiB"
                           for k, v in row["stages_s"].items() if k not in ("tree_s", "total_s"))
        grain = f"{row.get('topics', 100):,} topics ({row.get('shape', 'text')})"
        lines.append(f"n = {row['n']:,} float16, {grain}: ordered in {row['wall_s']:.0f} s (goal {GOAL_S} s: "
                     f"{'met' if row['wall_s'] <= GOAL_S else 'missed'}), peak {gib:.1f} GiB = {gb:.1f} GB (goal "
                     f"{GOAL_GB} GB: {'met' if gb <= GOAL_GB else 'missed'})")
        if row["planned_peak_gib"]:
            lines.append(f"planned peak {row['planned_peak_gib']} GiB: the measured peak is "
                         f"{100 * (gib / row['planned_peak_gib'] - 1):+.1f}% of the plan")
        if "permutation" in row:
            lines.append(f"the order is {'a' if row['permutation'] else 'NOT a'} permutation of all {row['n']:,} rows; "
                         f"the JSON Lines file held {row['jsonl_rows']:,} rows")
        lines.append(f"stages (seconds / peak resident): {stages}")
        if row["projected_search_s"] is not None:
            lines.append(f"search projected from the first {row['projected_after_rows']:,} rows: "
                         f"{row['projected_search_s']:,.0f} s; took {row['stages_s']['topk_s']:.0f} s")
        lines.append(f"recall@16 estimate of the run (256 rows against all n): {row['params'].get('recall_estimate'):.3f}, "
                     f"after {row['params'].get('refine_passes')} refinement passes")
    for row in results.get("ray", {}).values():
        same = {True: "the same order, root and tree weight", False: "a DIFFERENT order",
                None: "not compared (no single-process run in this session)"}[row["same_as_single_process"]]
        lines.append(f"n = {row['n']:,} on a local Ray cluster (--ray local): {row['wall_s']:.0f} s, {same} as the "
                     f"single-process run of {row['compared_with']}")
    for row in results.get("recall", {}).values():
        grain = f"{row.get('topics', 100):,} topics ({row.get('shape', 'text')})"
        lines.append(f"recall@16 of the sparse method on a sample of {row['n']:,} rows of the same data, {grain} (every "
                     f"row against its exact top-16): {row['recall']:.4f}")
    return lines
