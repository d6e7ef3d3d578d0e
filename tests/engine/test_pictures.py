"""Pictures: the figures hold what the results decided, and the pages open in a real browser."""

import os
import shutil
import subprocess

import numpy as np
import pytest
from conftest import unit_topics

from chunktree import Chunk, order, select
from chunktree.checks import InvalidValueError
from chunktree.engine import pictures

PAGE_ERRORS = ("Uncaught", "TypeError", "ReferenceError", "SyntaxError")


def _chunks(n, sources=3):
    return [Chunk(id=i, text=f"chunk {i} of document {i % sources}", source=f"doc{i % sources}.txt", index=i // sources,
                  start=0, end=10) for i in range(n)]


def _tree(n=40, query=True, seed=0):
    x, _ = unit_topics(n, topics=4, seed=seed)
    result = order(x, x[3] if query else None)
    import dataclasses

    return dataclasses.replace(result, items=_chunks(n), query="which chunk?" if query else None)


def _markers(fig):
    """chunk id -> (x, y) over the figure's node traces (those carrying chunk ids)."""
    where = {}
    for trace in fig.data:
        if trace.customdata is not None:
            for cid, x, y in zip(trace.customdata, trace.x, trace.y):
                assert int(cid) not in where, f"chunk {cid} drawn twice"
                where[int(cid)] = (float(x), float(y))
    return where


def _segments(fig, prefix):
    out = []
    for trace in fig.data:
        if trace.name and trace.name.startswith(prefix):
            xs, ys = list(trace.x), list(trace.y)
            out += [((xs[i], ys[i]), (xs[i + 1], ys[i + 1])) for i in range(0, len(xs), 3)]
    return out


def test_tree_figure_holds_one_marker_per_chunk_and_every_tree_edge():
    result = _tree()
    fig = pictures.tree_figure(result)
    where = _markers(fig)
    assert sorted(where) == list(range(40))
    at = {xy: cid for cid, xy in where.items()}
    drawn = {frozenset((at[a], at[b])) for a, b in _segments(fig, "edge")}
    assert drawn == {frozenset((i, int(result.parent[i]))) for i in range(40) if result.parent[i] >= 0}
    for i in range(40):  # top-down: every chunk one row below its parent, the root on top
        if result.parent[i] >= 0:
            assert where[i][1] == where[int(result.parent[i])][1] - 1
    assert where[result.root][1] == max(y for _, y in where.values())
    for trace in fig.data:  # coloured by source: a trace per source holds that source's chunks only
        if trace.customdata is not None:
            assert {result.items[int(c)].source for c in trace.customdata} == {trace.name}
    names = [t.name for t in fig.data]
    assert "root (read first)" in names and "query" in names
    query = next(t for t in fig.data if t.name == "query")
    assert query.y[0] == where[result.root][1] + 1 and query.x[0] == where[result.root][0]
    labels = {int(c): t for trace in fig.data if trace.customdata is not None
              for c, t in zip(trace.customdata, trace.text)}
    position = {int(c): p + 1 for p, c in enumerate(result.order)}
    assert labels == {c: str(p) for c, p in position.items()}  # numbered by reading position


def test_layout_of_a_hand_drawn_tree():
    # 0 -> (1, 2), 1 -> (3, 4); reading order 0 1 2 3 4: leaves 3, 4, 2 one apart, parents centred.
    parent = np.array([-1, 0, 0, 1, 1])
    nodes = np.arange(5)
    x, y = pictures.tree_layout(parent, nodes, np.arange(5))
    np.testing.assert_allclose(x, [1.25, 0.5, 2.0, 0.0, 1.0])
    np.testing.assert_allclose(y, [0, -1, -1, -2, -2])
    # a node whose parent is not drawn starts a tree of its own
    x, y = pictures.tree_layout(parent, np.array([0, 2, 3]), np.arange(5))
    np.testing.assert_allclose(y, [0, -1, 0])


def test_large_trees_are_drawn_for_their_first_chunks_in_reading_order():
    result = _tree(n=300, query=False)
    fig = pictures.tree_figure(result, max_nodes=50)
    assert set(_markers(fig)) == set(result.order[:50].tolist())
    assert "first 50 of 300 chunks" in fig.layout.title.text
    with pytest.raises(InvalidValueError, match="builds no tree"):
        pictures.tree_figure(order(unit_topics(10)[0], strategy="document"))


def test_clusters_figure_marks_the_representatives_on_the_principal_components():
    from sklearn.decomposition import PCA

    x, _ = unit_topics(120, topics=4, seed=2)
    result = select(x, 4)
    fig = pictures.clusters_figure(result)
    reps = next(t for t in fig.data if t.name == "representatives")
    assert sorted(int(c) for c in reps.customdata) == sorted(result.representatives)
    where = _markers(fig)
    assert sorted(where) == list(range(120))
    xy = np.array([where[i] for i in range(120)])
    ref = PCA(2).fit_transform(x.astype(np.float64))
    for k in range(2):  # the same components, up to sign
        assert abs(np.corrcoef(xy[:, k], ref[:, k])[0, 1]) > 0.9999
    colour = {int(c): col for t in fig.data if t.customdata is not None for c, col in zip(t.customdata, t.marker.color)}
    for c in result.clusters:  # one colour per cluster
        assert len({colour[int(m)] for m in c.members}) == 1
    sizes = sorted(int(a.text.split(": ")[1]) for a in fig.layout.annotations)
    assert sizes == sorted(c.size for c in result.clusters)
    # each label names the cluster by its id, from 0, as the text and JSON outputs do
    assert sorted(a.text for a in fig.layout.annotations) == sorted(f"#{i}: {c.size}" for i, c in enumerate(result.clusters))


def test_eval_figure_puts_the_gold_paragraphs_where_the_orders_did(embedder, tmp_path):
    from test_evaluate import PARAGRAPHS, hotpot_line

    from chunktree.engine.evaluate import evaluate_orders, format_report, load

    path = tmp_path / "h.jsonl"
    path.write_text(hotpot_line("Where was the author of Moby-Dick born?", ["New York City"], PARAGRAPHS, {1, 3}) + "\n")
    _, passages = load(path)
    result = evaluate_orders(passages, embedder, None, orders=("document", "dense"))
    fig = pictures.eval_figure(result)
    gold = {t.y[0]: sorted(t.x) for t in fig.data if t.mode == "markers"}
    assert gold["Q1 · document"] == [2, 4]  # document order reads paragraph i at i + 1
    x = embedder.embed([p for _, p in [(t, x) for t, x in PARAGRAPHS]])
    q = embedder.embed(["Where was the author of Moby-Dick born?"])[0]
    dense = order(x, q, strategy="dense").order.tolist()
    assert gold["Q1 · dense"] == sorted([dense.index(1) + 1, dense.index(3) + 1])
    page = pictures.eval_html(result, format_report(result), tmp_path / "e.html")
    assert "Where was the author of Moby-Dick born?" in page.read_text()


def test_png_pictures_are_written_and_not_blank(tmp_path):
    import matplotlib.image

    for path in (_tree().to_png(tmp_path / "t.png"), select(unit_topics(80)[0], 3).to_png(tmp_path / "c.png")):
        img = matplotlib.image.imread(path)[..., :3]
        assert (img.min(axis=2) < 0.9).mean() > 0.01 and len(np.unique(img.reshape(-1, 3), axis=0)) > 10


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if os.environ.get("CHUNKTREE_REQUIRE_BROWSER"):
        pytest.fail("CHUNKTREE_REQUIRE_BROWSER is set but no Chromium is installed")
    pytest.skip("no Chromium to open the pages in (.ci/run installs Debian's chromium)")


def _open_in_browser(pages):
    """Open each page in its own headless Chromium, all at once: per page, its console errors and
    the share of the screenshot that is not white."""
    import matplotlib.image

    runs = []
    for page in pages:
        shot, profile = page.with_suffix(".png"), page.with_suffix(".profile")
        runs.append((shot, subprocess.Popen(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", f"--screenshot={shot}",
             "--window-size=1200,800", "--virtual-time-budget=5000", page.as_uri()],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
    out = []
    for shot, proc in runs:
        _, stderr = proc.communicate(timeout=120)
        errors = [line for line in stderr.splitlines() if ":CONSOLE" in line and any(e in line for e in PAGE_ERRORS)]
        img = matplotlib.image.imread(shot)[..., :3]
        out.append((errors, float((img.min(axis=2) < 0.9).mean())))
    return out


def test_pages_open_in_a_real_browser_without_errors(tmp_path, embedder):
    from test_evaluate import PARAGRAPHS, hotpot_line

    from chunktree.engine.evaluate import evaluate_orders, format_report, load

    chromium = _chromium()
    assert chromium
    broken = tmp_path / "broken.html"  # the checks below can fail: a blank page that throws
    broken.write_text("<html><body><script>notDefined();</script></body></html>")
    tree = _tree(n=60)
    x, _ = unit_topics(200, topics=5, seed=4)
    data = tmp_path / "h.jsonl"
    data.write_text(hotpot_line("Where was the author of Moby-Dick born?", ["New York City"], PARAGRAPHS, {1, 3}) + "\n")
    evaluated = evaluate_orders(load(data)[1], embedder, None)
    pages = [broken, tree.to_html(tmp_path / "tree.html"), select(x, 5).to_html(tmp_path / "clusters.html"),
             pictures.eval_html(evaluated, format_report(evaluated), tmp_path / "eval.html")]
    (errors, inked), *opened = _open_in_browser(pages)
    assert errors and inked == 0.0
    for page, (errors, inked) in zip(pages[1:], opened):
        assert errors == [], page.name
        assert inked > 0.02, f"{page.name}: the screenshot is blank"
