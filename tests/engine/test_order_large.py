"""Ordering large inputs: float16 kept as float16 (and read as float32 a block at a time), the
memory plan and its budget, per-stage memory, progress with the projected time, and the probe
lists' selection."""

import io
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import chunktree.checks
from chunktree.checks import InvalidValueError
from chunktree.engine.datasets import synthetic_embeddings
from chunktree.engine.inputs import prepare
from chunktree.engine.memory import StageMeter, planned_peak_bytes, resident_bytes
from chunktree.engine.order import order


@pytest.fixture
def as_given(monkeypatch):
    """float32 rows within float16's unit tolerance are taken as they are, not renormalised, so a
    float32 copy of float16 rows holds exactly the values the float16 path reads."""
    monkeypatch.setattr(chunktree.checks, "UNIT_TOLERANCE", chunktree.checks.UNIT_TOLERANCE_F16)


@pytest.mark.parametrize(("n", "topics", "method", "strategy"), [
    (2000, 20, "exact", "runs"),
    (6000, 20, "sparse", "bfs"),  # clear topics: forest components joined
    (6000, 600, "sparse", "runs"),  # fine topics: refinement passes run
])
def test_float16_gives_the_order_of_its_float32_values(as_given, n, topics, method, strategy):
    h = synthetic_embeddings(n, topics=topics, seed=n).astype(np.float16)
    half, single = (order(v, method=method, strategy=strategy, k=8, probes=4) if method == "sparse"
                    else order(v, method=method, strategy=strategy) for v in (h, h.astype(np.float32)))
    np.testing.assert_array_equal(half.order, single.order)
    np.testing.assert_array_equal(half.parent, single.parent)
    assert half.tree_weight == single.tree_weight
    if topics == 600:
        assert half.params["refine_passes"] >= 1  # the refinement read float16 rows through its table
    if topics == 20 and method == "sparse":
        assert half.params["forest_components"] > 1  # so was the join


def test_float16_is_kept_and_a_memory_mapped_file_is_not_copied(tmp_path):
    x = synthetic_embeddings(3000, seed=1).astype(np.float16)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    vectors = prepare(mapped, keep_float16=True).vectors
    assert vectors.dtype == np.float16 and np.shares_memory(vectors, mapped)
    assert prepare(mapped).vectors.dtype == np.float32  # select, read: float32 as before
    # Rows off unit norm are normalised into a float16 copy.
    scaled = prepare(x * np.float16(3), keep_float16=True).vectors
    assert scaled.dtype == np.float16
    assert np.abs(np.linalg.norm(scaled.astype(np.float32), axis=1) - 1).max() < chunktree.checks.UNIT_TOLERANCE_F16
    r = order(mapped, method="sparse")
    assert sorted(r.order.tolist()) == list(range(3000))


def test_a_memory_budget_below_the_plan_is_refused_before_any_work():
    x = np.zeros((2_000_000, 384), dtype=np.float16)  # zero rows: reading them would fail on the first
    planned = planned_peak_bytes(2_000_000, 384, 2, 16, 16, copied=False)
    with pytest.raises(InvalidValueError) as err:
        order(x, memory_budget_mb=planned / 2**20 / 2)
    message = str(err.value)
    assert "2,000,000 x 384 float16" in message and "memory budget" in message and "GiB" in message
    with pytest.raises(InvalidValueError, match="zero-norm"):  # within the budget, the work starts
        order(x, memory_budget_mb=planned / 2**20 * 2)


def test_the_plan_counts_float32_copies_and_grows_with_n():
    kept = planned_peak_bytes(10_000_000, 384, 2, 16, 16, copied=False)
    assert kept > 10_000_000 * 384 * 2  # the vectors and more
    assert planned_peak_bytes(10_000_000, 384, 4, 16, 16, copied=True) - kept >= 10_000_000 * 384 * 6
    assert planned_peak_bytes(20_000_000, 384, 2, 16, 16, copied=False) == pytest.approx(2 * kept, rel=0.03)


def test_the_cli_refuses_a_budget_it_cannot_meet(tmp_path):
    np.save(tmp_path / "x.npy", synthetic_embeddings(30_000, seed=2).astype(np.float16))
    run = subprocess.run([sys.executable, "-m", "chunktree", "order", "--embeddings", str(tmp_path / "x.npy"),
                          "--memory-budget", "5"], capture_output=True, text=True)
    assert run.returncode == 2
    assert "30,000 x 384 float16" in run.stderr and "memory budget of 0.0 GiB (5 MB)" in run.stderr


def test_stage_meter_keeps_each_stages_peak():
    if resident_bytes() is None:
        pytest.skip("no /proc here")
    meter = StageMeter(interval=0.01)
    base = resident_bytes() / 2**20
    big = np.ones(300 * 2**20 // 8)  # 300 MB, touched
    meter.mark("grow")
    del big
    time.sleep(0.05)
    meter.mark("free")
    time.sleep(0.05)
    meter.mark("after")
    peaks = meter.close()
    assert peaks["grow"] >= base + 290
    assert peaks["after"] < peaks["grow"] - 250
    assert not any(t.name == "chunktree-stage-meter" for t in threading.enumerate())


def test_order_reports_the_peak_memory_of_every_stage():
    r = order(synthetic_embeddings(30_000, seed=3), method="sparse")
    assert set(r.peak_memory_mb) == {"embed", "kmeans", "topk", "refine", "forest", "join", "traverse"}
    assert all(v > 0 for v in r.peak_memory_mb.values())
    assert r.to_dict(top=1)["memory_mb"] == r.peak_memory_mb


def test_progress_shows_every_stage_and_the_time_left(monkeypatch, capfd):
    import chunktree.kernels.topk as topk

    monkeypatch.setattr(topk, "ROW_BLOCK", 2000)
    monkeypatch.setenv("CHUNKTREE_PROGRESS_SECONDS", "0")
    result = order(synthetic_embeddings(10_000, topics=1000, seed=4), method="sparse", progress=True)
    err = capfd.readouterr().err
    assert "order: K-means, 200 centres: 1/10 iterations (10%)" in err and "about" in err.split("K-means")[1]
    assert "order: neighbour search: " in err and "/10.0k rows" in err
    assert "projected from the first 2,000 rows: the search" in err
    assert result.params["refine_passes"] >= 1  # fuzzy data: the lists are refined, a pass at a time
    assert "order: refinement pass 1: 2.0k/10.0k rows (20%)" in err
    with io.StringIO() as out:
        result.write_json(out, lines=True, block=3_000, progress=True)  # the last block is short
    err = capfd.readouterr().err
    assert "order: writing: 3.0k/10.0k rows (30%)" in err and "order: writing: 10.0k/10.0k rows (100%)" in err


def test_probe_lists_are_the_nearest_centres_nearest_first_ties_to_the_lower():
    from chunktree.kernels.topk import probe_lists

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 24)).astype(np.float32)
    centers = rng.standard_normal((300, 24)).astype(np.float32)
    centers[7] = centers[3]  # exact ties
    got = probe_lists(x, centers, 9)
    s = x @ centers.T
    expected = np.lexsort((np.broadcast_to(np.arange(300), s.shape), -s), axis=1)[:, :9]
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(probe_lists(x.astype(np.float16), centers, 9),
                                  probe_lists(x.astype(np.float16).astype(np.float32), centers, 9))


def test_a_probe_gap_leaves_out_the_centres_far_below_the_nearest():
    from chunktree.kernels.topk import probe_lists

    rng = np.random.default_rng(1)
    x = rng.standard_normal((2000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    centers = x[rng.choice(2000, 120, replace=False)]
    full, gapped = probe_lists(x, centers, 10), probe_lists(x, centers, 10, gap=0.2)
    s = np.take_along_axis(x @ centers.T, full.astype(np.int64), axis=1)
    far = s[:, :1] - s > np.float32(0.2)
    assert far.any() and not far.all()
    np.testing.assert_array_equal(gapped, np.where(far, 120, full))  # left out: c, one past the last centre


def test_a_gapped_search_finds_the_best_k_among_the_clusters_it_searches():
    """An independent reference: each row's exact top-k among the members of its kept clusters."""
    from chunktree.kernels.topk import probe_lists, topk_clustered

    x = synthetic_embeddings(3000, topics=30, seed=6)
    centers = x[::60].copy()
    ids, sims = topk_clustered(x, 8, centers, 6, gap=0.1, row_block=700)
    probed = probe_lists(x, centers, 6, gap=0.1).astype(np.int64)
    home = probed[:, 0]
    for r in np.random.default_rng(0).choice(3000, 200, replace=False):
        kept = probed[r][probed[r] < 50]
        cand = np.flatnonzero(np.isin(home, kept) & (np.arange(3000) != r))
        s = x[cand] @ x[r]
        best = cand[np.lexsort((cand, -s))[:8]]
        np.testing.assert_array_equal(ids[r], best)
        np.testing.assert_allclose(sims[r], np.sort(s)[::-1][:8], rtol=1e-5)


def test_the_projection_counts_the_blocks_searched_at_once(monkeypatch, caplog):
    """Probe lists in 10 s, the first of 8 blocks searched 30 s later: 10 + 8 x 30 s in one
    process, 10 + 4 x 30 s with two blocks at a time (Ray tasks)."""
    import logging

    import chunktree.engine.order as order_module

    for at_once, want in ((1, 250), (2, 130)):
        clock = iter([0.0, 10.0, 40.0])
        monkeypatch.setattr(order_module.time, "perf_counter", lambda clock=clock: next(clock))
        bar = order_module._SearchProgress(8000, enabled=False)
        bar.at_once = at_once
        bar.probed(8000)
        with caplog.at_level(logging.INFO, logger="chunktree.engine.order"):
            bar.searched(1000)
        assert f"the search will take about {want} s" in caplog.text
        caplog.clear()


def test_texts_are_planned_once_embedded(embedder):
    texts = [f"note {i} about bread, pods and aqueducts" for i in range(30)]
    with pytest.raises(InvalidValueError, match="ordering 30 x 384 float32 vectors needs about"):
        order(texts, embedder=embedder, memory_budget_mb=0.001)
    assert order(texts, embedder=embedder, memory_budget_mb=1000).order.size == 30
