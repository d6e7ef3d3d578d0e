"""The order() API: roots, strategies, invariances, baselines and bad input."""

import numpy as np
import pytest
from scipy.sparse.csgraph import minimum_spanning_tree

from chunktree.engine.order import order


def clustered(n, d=32, topics=5, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((topics, d))
    x = centres[rng.integers(0, topics, n)] + 0.6 * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_bfs_result_contract():
    x = clustered(200)
    q = x[17] + 0.1 * x[3]
    r = order(x, q, strategy="bfs")
    assert sorted(r.order.tolist()) == list(range(200)) and r.order.dtype == np.int64
    qsim = x @ (q / np.linalg.norm(q))
    assert r.root == r.order[0] == int(np.argmax(qsim))
    np.testing.assert_allclose(r.query_similarity, qsim, atol=1e-6)
    pos = np.argsort(r.order)
    assert all(pos[i] > pos[r.parent[i]] for i in range(200) if i != r.root)
    sim = x.astype(np.float64) @ x.T
    w = 2.0 - sim
    np.fill_diagonal(w, 0)
    mst = minimum_spanning_tree(w)
    assert r.tree_weight == pytest.approx(2.0 * mst.nnz - mst.sum(), rel=1e-5)
    others = np.flatnonzero(r.parent >= 0)
    np.testing.assert_allclose(r.parent_similarity[others], sim[others, r.parent[others]], atol=1e-5)
    rows = r.explain()
    assert rows[0] == {"position": 0, "chunk": r.root, "parent": None, "parent_similarity": None,
                       "query_similarity": pytest.approx(float(qsim[r.root]))}
    assert [row["chunk"] for row in rows] == r.order.tolist()
    assert [row["parent"] for row in rows[1:]] == r.parent[r.order[1:]].tolist()
    assert r.explain(top=5) == rows[:5]
    assert (r.strategy, r.method, r.params["n"], r.params["dims"]) == ("bfs", "exact", 200, 32)
    assert set(r.timings) == {"embed_s", "tree_s", "traverse_s", "total_s"}
    assert not set(r.timings) & set(r.params)


def test_to_dict_is_json_ready_with_provenance():
    import dataclasses
    import json

    from chunktree import Chunk

    x = clustered(6, seed=11)
    chunks = [Chunk(id=i, text=f"text {i}", source="s.txt", index=i, start=10 * i, end=10 * i + 6)
              for i in range(6)]
    r = order(x, x[2])
    doc = json.loads(json.dumps(r.to_dict(top=3)))  # plain JSON types only
    assert doc["order"] == r.order.tolist() and len(doc["chunks"]) == 3 and doc["n_chunks"] == 6
    assert doc["chunks"][0]["parent"] is None and doc["chunks"][0]["parent_similarity"] is None
    assert doc["chunks"][0]["source"] is None and doc["embedding"] is None  # vectors: no provenance
    with_chunks = dataclasses.replace(r, items=chunks).to_dict()
    first = with_chunks["chunks"][0]
    c = chunks[r.root]
    assert (first["id"], first["source"], first["start"], first["end"], first["text"]) == \
        (c.id, "s.txt", c.start, c.end, c.text)
    baseline = order(x, x[2], strategy="document").to_dict()
    assert baseline["tree_weight"] is None and baseline["chunks"][1]["parent"] is None


def test_root_without_query_is_most_central():
    x = clustered(150, seed=1)
    r = order(x)
    assert r.root == int(np.argmax((x.astype(np.float64) @ x.T).mean(axis=1)))
    assert r.query_similarity is None
    assert order(x, root=42).order[0] == 42


def test_dfs_is_a_preorder_of_the_same_tree():
    x = clustered(120, seed=2)
    b, d = order(x, strategy="bfs"), order(x, strategy="dfs")
    np.testing.assert_array_equal(b.parent, d.parent)
    pos = np.argsort(d.order)
    assert all(pos[i] > pos[d.parent[i]] for i in range(120) if i != d.root)
    first_child = [c for c in range(120) if d.parent[c] == d.root]
    assert d.order[1] == max(first_child, key=lambda c: d.parent_similarity[c])


def test_float64_gives_the_float32_order():
    x = clustered(300, seed=3)
    np.testing.assert_array_equal(order(x.astype(np.float64)).order, order(x).order)


def test_permuting_the_input_permutes_the_order():
    x = clustered(250, seed=4)
    q = x[5]
    perm = np.random.default_rng(0).permutation(250)
    base, moved = order(x, q), order(x[perm], q)
    np.testing.assert_array_equal(perm[moved.order], base.order)


def test_baselines():
    x = clustered(50, seed=6)
    q = x[9]
    doc = order(x, q, strategy="document")
    assert doc.order.tolist() == list(range(50)) and doc.parent is None and np.isnan(doc.tree_weight)
    dense = order(x, q, strategy="dense")
    assert dense.order.tolist() == sorted(range(50), key=lambda i: (-float(x[i] @ q), i))


def reference_guided(parent, weight, qsim, root, blend):
    """Best-first over the tree, the slow way: scan the whole frontier at every step."""
    priority = blend * weight + (1 - blend) * qsim
    order, frontier = [root], {int(c) for c in np.flatnonzero(parent == root)}
    while frontier:
        v = max(frontier, key=lambda c: (priority[c], -c))
        frontier.remove(v)
        order.append(v)
        frontier |= {int(c) for c in np.flatnonzero(parent == v)}
    return order


@pytest.mark.parametrize("blend", [0.0, 0.5, 1.0])
def test_guided_is_best_first_over_the_tree(blend):
    x = clustered(150, seed=12)
    q = x[40] + x[99]
    r = order(x, q, strategy="guided", blend=blend)
    qsim = x @ (q / np.linalg.norm(q))
    assert r.order.tolist() == reference_guided(r.parent, np.nan_to_num(r.parent_similarity), qsim, r.root, blend)
    np.testing.assert_array_equal(r.parent, order(x, q).parent)  # the same tree as bfs
    assert r.params["blend"] == blend


def test_dense_tree_pulls_each_chunks_neighbours_in_after_it():
    x = clustered(120, seed=13)
    q = x[7]
    r = order(x, q, strategy="dense_tree")
    dense = order(x, q, strategy="dense").order.tolist()
    assert sorted(r.order.tolist()) == list(range(120)) and r.order[0] == dense[0] == r.root
    placed, want = set(), []
    for v in dense:  # the reference: walk the dense order, pull in unplaced tree neighbours
        if v in placed:
            continue
        near = [int(c) for c in np.flatnonzero(r.parent == v)] + ([int(r.parent[v])] if r.parent[v] >= 0 else [])
        edge = {c: (r.parent_similarity[c] if r.parent[c] == v else r.parent_similarity[v]) for c in near}
        near = sorted((c for c in near if c not in placed), key=lambda c: (-edge[c], c))
        for u in [v, *near]:
            placed.add(u)
            want.append(u)
    assert r.order.tolist() == want
    central = order(x, strategy="dense_tree")  # without a query: ranked by centrality
    assert central.root == central.order[0] == order(x).root


@pytest.mark.parametrize("n", [1, 2])
def test_tiny_inputs(n):
    r = order(clustered(n, seed=7))
    assert sorted(r.order.tolist()) == list(range(n))


def test_duplicate_vectors_are_joined_to_their_copies():
    x = np.repeat(clustered(10, seed=8), 4, axis=0)  # ten vectors, each four times
    r = order(x)
    assert sorted(r.order.tolist()) == list(range(40))
    # A maximum spanning tree holds a spanning forest of the weight-1 edges: 10 groups of 4
    # copies need 3 edges each.
    copies = np.flatnonzero(r.parent >= 0)
    same = (copies // 4) == (r.parent[copies] // 4)
    assert same.sum() == 30
    np.testing.assert_allclose(r.parent_similarity[copies[same]], 1.0, atol=1e-6)


def test_texts_are_embedded(embedder):
    texts = ["The whale dived.", "Ahab paced the deck.", "The whale surfaced again.", "Oil casks in the hold."]
    r = order(texts, "Where is the whale?", embedder=embedder)
    want = order(embedder.embed(texts), embedder.embed(["Where is the whale?"])[0])
    np.testing.assert_array_equal(r.order, want.order)


def test_items_name_the_rows_of_embeddings(tmp_path, embedder):
    """Chunks written beside their vectors (``write_embeddings``), read back (``load_embeddings``)
    and given as ``items``: the order of the vectors alone, with each row's text and provenance;
    a count that does not match the rows is refused before any work."""
    from chunktree.engine.chunking import Chunk
    from chunktree.engine.embeddings_file import load_embeddings, write_embeddings

    texts = ["The whale dived.", "Ahab paced the deck.", "The whale surfaced again.", "Oil casks in the hold."]
    chunks = [Chunk(i, t, "notes.txt", i, 20 * i, 20 * i + len(t)) for i, t in enumerate(texts)]
    write_embeddings(chunks, tmp_path / "x.npy", embedder)
    vectors, read_back = load_embeddings(tmp_path / "x.npy")
    assert read_back == chunks
    np.testing.assert_allclose(vectors, embedder.embed([embedder.prompt("document") + t for t in texts]), atol=1e-6)
    r = order(vectors, items=read_back)
    assert r.order.tolist() == order(vectors).order.tolist()
    rows = r.to_dict()["chunks"]
    assert [row["text"] for row in rows] == [texts[i] for i in r.order]
    assert [row["start"] for row in rows] == [20 * i for i in r.order]
    with pytest.raises(ValueError, match=r"items must hold one chunk or string per row of the embeddings \(4\); got 3") as e:
        order(vectors, items=read_back[:3])
    assert e.value.param == "items"
    with pytest.raises(ValueError, match="items names the rows of embeddings"):
        order(texts, items=texts, embedder=embedder)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"chunks_or_embeddings": np.zeros((0, 4))}, ValueError, "at least one chunk.*got 0"),
    ({"chunks_or_embeddings": np.zeros(4)}, ValueError, r"2-D array \(n, d\); got shape \(4,\)"),
    ({"chunks_or_embeddings": np.array([[1.0, np.nan]])}, ValueError, "must be finite; found nan at index"),
    ({"chunks_or_embeddings": np.array([[1.0, 0], [np.inf, 1]])}, ValueError, "must be finite; found inf"),
    ({"chunks_or_embeddings": np.array([[1.0, 0], [0, 0]])}, ValueError, r"zero-norm vectors at rows \[1\]"),
    ({"chunks_or_embeddings": np.array([["a", "b"]], dtype=object)}, TypeError, "numeric array"),
    ({"query": np.ones(3)}, ValueError, r"vector of 2 dims; got shape \(3,\)"),
    ({"query": np.zeros(2)}, ValueError, "query has zero-norm"),
    ({"strategy": "random"}, ValueError,
     r"strategy must be one of \['bfs', 'dfs', 'guided', 'dense_tree', 'runs', 'document', 'dense'\]; got 'random'"),
    ({"strategy": "guided", "blend": 1.5}, ValueError, r"blend must be a number in \[0.0, 1.0\]; got 1.5"),
    ({"method": "fast"}, ValueError, "method must be one of .*got 'fast'"),
    ({"root": 3}, ValueError, r"root \(a chunk index\) must be in \[0, 2\]; got 3"),
    ({"root": -1}, ValueError, r"root \(a chunk index\) must be in \[0, 2\]; got -1"),
    ({"root": True}, TypeError, r"root \(a chunk index\) must be an int; got True"),
    ({"query": ""}, ValueError, "query must hold visible text"),
    ({"seed": -1}, ValueError, r"seed must be in \[0, 9223372036854775807\]; got -1"),
    ({"strategy": "dense"}, ValueError, "needs a query"),
])
def test_bad_input(kwargs, error, message):
    from chunktree import ChunktreeError

    args = {"chunks_or_embeddings": np.array([[1.0, 0], [0, 1], [1, 1]]), **kwargs}
    with pytest.raises(error, match=message) as caught:
        order(**args)
    assert isinstance(caught.value, ChunktreeError)


def test_bad_arguments_fail_before_embedding():
    class Refuses:
        def embed(self, texts, **kwargs):
            raise AssertionError("embedded before checking the arguments")

    for kwargs in ({"root": -1}, {"root": 2}, {"strategy": "x"}, {"k": 0, "method": "sparse"}, {"seed": -1}):
        with pytest.raises(ValueError):
            order(["a", "b"], embedder=Refuses(), **kwargs)


def tree_is_spanning(r, n):
    """One tree over all n chunks, read root first and every chunk after its parent (bfs)."""
    assert r.strategy == "bfs"
    assert sorted(r.order.tolist()) == list(range(n))
    assert r.parent[r.root] == -1 and (np.delete(r.parent, r.root) >= 0).all()
    pos = np.argsort(r.order)
    assert all(pos[i] > pos[r.parent[i]] for i in range(n) if i != r.root)


def test_sparse_joins_a_disconnected_topk_graph():
    rng = np.random.default_rng(0)
    far = 20 * rng.standard_normal((30, 16))  # 30 well-separated topics
    x = far[rng.integers(0, 30, 900)] + rng.standard_normal((900, 16))
    r = order(x, method="sparse", k=3, strategy="bfs")
    assert r.method == "sparse" and r.params["forest_components"] > 1
    assert r.params["joining_edges"] == r.params["forest_components"] - 1
    tree_is_spanning(r, 900)
    assert r.tree_weight >= 0.99 * order(x, method="exact").tree_weight


def test_sparse_refines_fuzzy_neighbour_lists_and_measures_their_recall():
    from chunktree.engine.datasets import synthetic_embeddings
    from chunktree.engine.order import sparse_neighbours
    from chunktree.kernels.kmeans import spherical_kmeans
    from chunktree.kernels.topk import topk_clustered, topk_exact

    x = synthetic_embeddings(4000, topics=400, seed=4)  # fine topics: 4 probes miss many neighbours
    info = {}
    ids, _ = sparse_neighbours(x, 10, 126, 4, seed=0, info=info)
    exact = topk_exact(x, 10)[0]

    def recall(lists):
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(lists.tolist(), exact.tolist())])

    unrefined = topk_clustered(x, 10, spherical_kmeans(x, 126, 0), 4)[0]
    assert recall(unrefined) < 0.85 and info["refine_passes"] >= 1
    assert recall(ids) >= recall(unrefined) + 0.08
    assert abs(info["recall_estimate"] - recall(ids)) < 0.03  # 256 sampled rows estimate all 4,000
    # Clear topics: the search is already exact enough and no pass runs.
    easy = {}
    sparse_neighbours(clustered(2000, topics=5, seed=1), 10, 20, 8, info=easy)
    assert easy["refine_passes"] == 0 and easy["recall_estimate"] >= 0.99


def test_sparse_handles_k_at_least_n():
    x = clustered(6, seed=9)
    small = order(x[:6], method="sparse", k=50)
    assert small.params["k"] == 5
    assert small.tree_weight == pytest.approx(order(x[:6], method="exact").tree_weight, rel=1e-6)
    assert order(x[:1], method="sparse").order.tolist() == [0]


def test_sparse_permuting_the_input_permutes_the_tree_weight():
    x = clustered(400, seed=9)
    perm = np.random.default_rng(1).permutation(400)
    base, moved = order(x, method="sparse"), order(x[perm], method="sparse", strategy="bfs")
    tree_is_spanning(moved, 400)
    assert moved.tree_weight == pytest.approx(base.tree_weight, rel=1e-3)


def sparse_ratio(x):
    exact, sparse = order(x, method="exact"), order(x, method="sparse", strategy="bfs")
    tree_is_spanning(sparse, len(x))
    return sparse.tree_weight / exact.tree_weight


@pytest.mark.real_data
def test_sparse_weight_on_the_sample_corpus(sample_embeddings):
    assert sparse_ratio(sample_embeddings) >= 0.99


@pytest.mark.real_data
def test_sparse_weight_on_squad_articles(embedder, squad_articles):
    paragraphs = [p["context"] for a in squad_articles[:12] for p in a["paragraphs"]]
    assert len(paragraphs) > 300
    assert sparse_ratio(embedder.embed(paragraphs)) >= 0.99


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "sparse", "k": 0}, "k must be >= 1; got 0"),
    ({"method": "sparse", "probes": -2}, "probes must be >= 1; got -2"),
    ({"method": "sparse", "n_clusters": 1.5}, r"n_clusters must be an int; got 1.5 \(float\)"),
    ({"method": "sparse", "n_clusters": 0}, "n_clusters must be >= 1; got 0"),
    ({"method": "sparse", "probes": 0}, "probes must be >= 1; got 0"),
    ({"method": "exact", "k": 8}, "do not apply to method='exact'"),
])
def test_sparse_parameter_errors(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        order(clustered(20), **kwargs)


def test_the_result_counts_exact_duplicates():
    x = np.random.default_rng(5).standard_normal((30, 8)).astype(np.float32)
    x[[10, 20, 25]] = x[3]
    x[29] = x[0]
    assert order(x).params["duplicates"] == 4
    assert order(["a", "b", "a", "c", "b"]).params["duplicates"] == 2


def test_rows_alike_in_the_hashed_dimensions_are_not_taken_for_copies():
    from chunktree.engine.inputs import HASHED_DIMS, prepare

    rng = np.random.default_rng(6)
    x = rng.standard_normal((40, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[11] = x[2]
    hashed = np.sort(np.random.default_rng(0).choice(64, HASHED_DIMS, replace=False))
    a, b = np.setdiff1d(np.arange(64), hashed)[:2]
    x[12] = x[2]
    x[12, [a, b]] = x[2, [b, a]]  # row 2 in every hashed dimension, and its norm; two others swapped
    inputs = prepare(x)
    assert np.array_equal(inputs.vectors[12, hashed], inputs.vectors[2, hashed])
    first = inputs.first_copies()
    assert first[11] == 2 and first[12] == 12 and (first == np.arange(40)).sum() == 39


@pytest.mark.parametrize("top", [None, 23])
def test_json_written_a_block_at_a_time_is_the_results_dict(top):
    """``write_json`` streams rows in blocks (here of 7, across many block edges): the JSON is
    ``to_dict``'s, and the JSON Lines are its chunk rows."""
    import dataclasses
    import io
    import json

    from strict_json import loads

    from chunktree import Chunk

    x = np.random.default_rng(8).standard_normal((50, 12)).astype(np.float32)
    chunks = [Chunk(id=i, text=f"text {i}", source="a.md", index=i, start=10 * i, end=10 * i + 6) for i in range(50)]
    result = dataclasses.replace(order(x, x[3]), items=chunks)
    whole, lines = io.StringIO(), io.StringIO()
    result.write_json(whole, top, block=7)
    result.write_json(lines, top, lines=True, block=7)
    want = json.loads(json.dumps(result.to_dict(top)))
    assert loads(whole.getvalue()) == want and len(want["chunks"]) == (top or 50)
    assert [loads(line) for line in lines.getvalue().splitlines()] == want["chunks"]
