"""chunktree scale: its measurements against independent references, its projections against a
known power law, and the command end to end (report, plots, a clean stop at the budget)."""


import numpy as np
import pytest
from strict_json import loads

from chunktree.apps.scale import _recall
from chunktree.apps.scale_report import STAGES, SizeResult, fits, projected_limits
from chunktree.engine.datasets import synthetic_embeddings, topic_embeddings
from chunktree.engine.order import sparse_neighbours
from chunktree.kernels.topk import exact_sims_of_rows, topk_exact


def test_synthetic_embeddings_are_unit_rows_with_realistic_neighbourhoods():
    x = synthetic_embeddings(3000, seed=0)
    assert x.shape == (3000, 384) and x.dtype == np.float32 and x.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(x, synthetic_embeddings(3000, seed=0))
    sims = topk_exact(x, 16)[1]
    rng = np.random.default_rng(1)
    pairs = np.sum(x[rng.integers(0, 3000, 5000)] * x[rng.integers(0, 3000, 5000)], axis=1)
    # The module's stated shape (close to all-MiniLM-L6-v2 on the Moby-Dick sample).
    assert abs(pairs.mean() - 0.34) < 0.05
    assert abs(sims[:, 0].mean() - 0.65) < 0.05 and abs(sims[:, 15].mean() - 0.55) < 0.05


def test_topic_embeddings_keep_each_blocks_topics_to_itself():
    x = topic_embeddings(3000, 30, block=1000, seed=0)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    ids, sims = topk_exact(x, 16)
    # Ten topics a block, about 100 rows a topic: a row's 16 nearest share its topic, so its block.
    assert (ids // 1000 == np.arange(3000)[:, None] // 1000).all()
    assert abs(sims[:, 15].mean() - 0.55) < 0.05  # a same-topic pair: about 1 / (1 + 0.9^2) in cosine
    shared = topic_embeddings(3000, 2, block=1000, seed=0)  # fewer topics than blocks: every block draws from both
    ids = topk_exact(shared, 16)[0]
    assert (ids // 1000 != np.arange(3000)[:, None] // 1000).mean() > 0.5


def test_exact_sims_of_rows_match_the_exact_top_k():
    x = synthetic_embeddings(2500, topics=30, seed=2)
    rows = np.array([0, 7, 1999, 2499])
    np.testing.assert_allclose(exact_sims_of_rows(x, rows, 16, block=700), topk_exact(x, 16)[1][rows], atol=1e-5)


def test_recall_matches_the_overlap_of_the_lists_with_exact_ones():
    x = synthetic_embeddings(1500, topics=300, seed=3)  # fuzzy: the recall is well below 1
    k, clusters, probes = 16, 40, 3
    ids, _ = sparse_neighbours(x, k, clusters, probes, seed=0)
    exact = topk_exact(x, k)[0]
    overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(ids.tolist(), exact.tolist())])
    got, gap = _recall(x, k, clusters, probes, seed=0)  # on 1,000 of the 1,500 rows
    assert 0.3 < overlap < 0.95
    assert abs(got - overlap) < 0.03
    exact_sims = topk_exact(x, 4 * k)[1]
    assert gap == pytest.approx(float(np.mean(exact_sims[:, k - 1] - exact_sims[:, -1])), abs=0.01)


def test_the_report_says_why_recall_is_low(tmp_path):
    from chunktree.apps.scale_report import STAGES, Sweep, write_report

    stages = dict.fromkeys(STAGES, 0.1)
    low = SizeResult(n=10_000, stages=stages, order_s=1.0, peak_rss_mb=300.0, base_rss_mb=100.0, data_mb=15.0,
                     recall=0.58, weight_ratio=0.99217, neighbour_gap=0.018)
    high = SizeResult(n=100_000, stages=stages, order_s=9.0, peak_rss_mb=310.0, base_rss_mb=100.0, data_mb=150.0,
                      recall=0.973, neighbour_gap=0.067)
    write_report(Sweep("synthetic, 5000 topics", [low, high], time_budget_s=600.0, memory_budget_mb=18_000.0), tmp_path,
                 plots=False)
    report = (tmp_path / "report.md").read_text()
    assert ("n=10,000: recall@16 is 0.580 because the 16 nearest are barely a set: a sampled chunk's exact 16th "
            "and 64th neighbours differ by 0.018") in report
    assert "99.217% of the exact tree's" in report and "n=100,000: recall@16" not in report
    # two sizes fit any curve: no growth, no projection
    assert ("measured n = 10,000, 100,000: growth is fitted to at least 3 sizes (two points fit any curve), so no "
            "growth or projection is given") in report and "projected" not in report
    middle = SizeResult(n=30_000, stages=stages, order_s=3.0, peak_rss_mb=305.0, base_rss_mb=100.0, data_mb=45.0)
    write_report(Sweep("synthetic", [low, middle, high], time_budget_s=600.0, memory_budget_mb=18_000.0), tmp_path,
                 plots=False)
    report = (tmp_path / "report.md").read_text()
    # peak memory barely grows over the three sizes: its projected limit is out of the power law's reach
    assert "least squares on logs of the largest 3 sizes, n = 10,000 to 100,000" in report
    assert "at the memory budget (18000 MB): beyond 10x the largest size measured (more than 1,000,000)" in report


def size(n, seconds, mb):
    return SizeResult(n=n, stages={}, order_s=seconds, peak_rss_mb=mb, base_rss_mb=100.0, data_mb=0.0)


def test_each_stage_has_its_growth_exponent():
    def at(n):
        stages = {st: 1e-6 * n ** (1.0 + 0.1 * i) for i, st in enumerate(STAGES)}
        return SizeResult(n=n, stages=stages, order_s=sum(stages.values()), peak_rss_mb=200.0, base_rss_mb=100.0,
                          data_mb=0.0)

    f = fits([at(n) for n in (100_000, 1_000_000, 10_000_000)])
    for i, st in enumerate(STAGES):
        assert f[st.removesuffix("_s") + "_exponent"] == pytest.approx(1.0 + 0.1 * i)


def test_projections_invert_a_known_power_law_within_ten_times_the_largest_size():
    sizes = [size(n, 2e-6 * n ** 1.25, 100.0 + 0.004 * n) for n in (10_000, 30_000, 100_000)]
    f = fits(sizes)
    assert f["time_exponent"] == pytest.approx(1.25) and f["memory_exponent"] == pytest.approx(1.0)
    assert fits(sizes[:2])["time_exponent"] is None  # never from two sizes
    limits = projected_limits(sizes, 30.0, 2100.0)
    assert 2e-6 * limits["time"]["n"] ** 1.25 == pytest.approx(30.0) and not limits["time"]["beyond"]
    assert limits["memory"]["n"] == pytest.approx(500_000)
    # an exact power law: every pair of sizes grows alike, so the range is the point itself
    assert limits["memory"]["low"] == pytest.approx(500_000) and limits["memory"]["high"] == pytest.approx(500_000)
    far = projected_limits(sizes, 600.0, 100.0 + 0.004 * 5_000_000)
    assert far["memory"] == {"n": 1_000_000, "low": 1_000_000, "high": 1_000_000, "beyond": True, "high_beyond": True}
    assert projected_limits(sizes[:2], 600.0, 2100.0) == {"time": None, "memory": None}


def test_a_projection_from_uneven_growth_comes_with_its_range():
    # time grows as n^1 from 10k to 30k and as n^1.5 from 30k to 100k
    times = {10_000: 1.0, 30_000: 3.0, 100_000: 3.0 * (100 / 30) ** 1.5}
    sizes = [size(n, t, 200.0) for n, t in times.items()]
    budget = 2 * times[100_000]
    got = projected_limits(sizes, budget, 10_000.0)["time"]
    # the ends are where each pair's own power law reaches the budget: the slower one (n^1) latest
    assert 3.0 * (got["high"] / 30_000) ** 1.0 == pytest.approx(budget)
    assert times[100_000] * (got["low"] / 100_000) ** 1.5 == pytest.approx(budget)
    assert got["low"] < got["n"] < got["high"]


def test_scale_command_writes_the_report_and_plots_and_stops_at_the_budget(tmp_path, cli):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    r = cli("scale", "--sizes", "800", "1600", "3200", "--shape", "topics", "--topics", "16", "--time-budget", "0.01",
            "-o", out)
    assert r.returncode == 0, r.stderr
    doc = loads((out / "scale.json").read_text())
    assert doc["source"] == "synthetic (topics), 16 topics, float32"
    # Two sizes are needed to project; the third is projected past 0.01 s and left out.
    assert [row["n"] for row in doc["sizes"]] == [800, 1600]
    assert doc["stopped"].startswith("n=3,200 left out: projected")
    assert "scale: n=3,200 left out" in r.stderr
    for row in doc["sizes"]:
        assert 0.9 <= row["recall"] <= 1.0 and 0.99 <= row["weight_ratio"] <= 1.0
        assert row["peak_rss_mb"] >= row["base_rss_mb"] > 0  # at n=800 the work can fit in pages already held
        assert sum(row["stages"].values()) <= row["order_s"]
    report = (out / "report.md").read_text()
    assert "| 1,600 |" in report and "stopped: n=3,200" in report
    import matplotlib.image

    for name in ("time.png", "memory.png"):
        picture = matplotlib.image.imread(out / name)
        assert picture.shape[0] > 300 and picture.shape[1] > 500
        assert picture[..., :3].std() > 0.05  # not a blank canvas


def test_scale_refuses_bad_input_before_work(tmp_path, capsys):
    from chunktree.apps.cli.main import main

    bad = tmp_path / "x.npy"
    bad.write_text("not an array")
    for args, message in ((["--embeddings", str(bad)], "not a readable .npy file"),
                          (["--time-budget", "0"], "argument --time-budget: must be a finite number > 0; got '0'"),
                          (["--sizes", "1"], "argument --sizes: must be >= 100; got 1")):
        assert main(["scale", "--no-plots", "-o", str(tmp_path / "r"), *args]) == 2
        err = capsys.readouterr().err
        assert message in err, err


def _scale(tmp_path, cli, *args):
    """``chunktree scale ARGS`` in this process (each size is still measured in a process of its
    own), and the scale.json written."""
    out = tmp_path / "report"
    r = cli("scale", "--no-plots", "-o", out, *args)
    return r, loads((out / "scale.json").read_text())


def test_scale_stops_a_child_past_the_memory_budget_and_exits_non_zero(tmp_path, cli):
    # The interpreter with numpy and the kernels alone holds more than 40 MB: the child is stopped
    # while it runs, not after.
    r, doc = _scale(tmp_path, cli, "--sizes", "800", "--memory-budget", "40")
    assert r.returncode == 1
    assert doc["sizes"] == [] and doc["failed"] is False
    assert doc["stopped"].startswith("n=800 stopped at ") and "past the memory budget 40 MB" in doc["stopped"]
    assert "no size was measured" in r.stderr


def test_scale_leaves_out_a_size_whose_vectors_alone_pass_the_budget(tmp_path, cli):
    r, doc = _scale(tmp_path, cli, "--sizes", "1000000000000")
    assert r.returncode == 1, r.stderr
    assert doc["stopped"].startswith("n=1,000,000,000,000 left out: its vectors alone take 1,464,843,750 MB")
    assert "Traceback" not in r.stderr


def test_scale_reports_a_child_that_failed_and_exits_non_zero(tmp_path, cli):
    x = np.random.default_rng(0).standard_normal((200, 8)).astype(np.float32)
    x[7] = 0.0  # a zero row: the child's unit-row check refuses it
    np.save(tmp_path / "x.npy", x)
    r, doc = _scale(tmp_path, cli, "--sizes", "200", "--embeddings", str(tmp_path / "x.npy"))
    assert r.returncode == 1
    assert doc["failed"] is True
    assert doc["stopped"].startswith("n=200: the measuring process failed: InvalidValueError: embeddings")
    assert "zero-norm vectors at rows [7]" in doc["stopped"]
