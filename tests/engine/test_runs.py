"""The "runs" order: its kernel against the rule it implements, its tiers, and topics read as runs
on small labelled corpora with the real model."""

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from chunktree.engine.order import RUNS_HEAD, order
from chunktree.kernels.traversal import children_csr, runs_order

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NOTES = Path(__file__).resolve().parents[2] / "examples" / "notes"


def random_tree(n, rng):
    parent = np.full(n, -1, dtype=np.int64)
    for v in range(1, n):
        parent[v] = rng.integers(0, v)
    perm = rng.permutation(n)  # vertex names in no particular order
    renamed = np.full(n, -1, dtype=np.int64)
    renamed[perm[1:]] = perm[parent[1:]]
    return renamed


def reference_runs(parent, chunk_key, edge_key):
    """The rule, step by step in O(n^2): read the unread vertex of highest key, its key being its own
    or that of a tree edge to a vertex already read, whichever is higher; ties to the lower index."""
    n = len(parent)
    read, out = set(), []
    while len(out) < n:
        def key(u):
            k = chunk_key[u]
            if parent[u] >= 0 and parent[u] in read:
                k = max(k, edge_key[u])
            for c in np.flatnonzero(parent == u):
                if c in read:
                    k = max(k, edge_key[c])
            return k
        best = max((u for u in range(n) if u not in read), key=lambda u: (key(u), -u))
        read.add(best)
        out.append(best)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_kernel_reads_by_the_rule(seed):
    rng = np.random.default_rng(seed)
    n = 60
    parent = random_tree(n, rng)
    chunk_key = rng.normal(size=n).round(1)  # rounded: ties happen
    edge_key = rng.normal(size=n).round(1)
    indptr, children = children_csr(parent)
    got = runs_order(indptr, children, parent, chunk_key, edge_key)
    assert got.tolist() == reference_runs(parent, chunk_key, edge_key)


def test_without_a_strong_edge_the_kernel_is_the_ranking():
    rng = np.random.default_rng(9)
    parent = random_tree(200, rng)
    chunk_key = rng.normal(size=200)
    indptr, children = children_csr(parent)
    got = runs_order(indptr, children, parent, chunk_key, np.full(200, -np.inf))
    assert got.tolist() == np.lexsort((np.arange(200), -chunk_key)).tolist()


def clustered(n, d=32, topics=6, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((topics, d))
    x = centres[rng.integers(0, topics, n)] + 0.7 * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("method", ["exact", "sparse"])
def test_the_query_head_comes_first_in_query_order(method):
    x = clustered(600, seed=3)
    q = x[11] + 0.5 * x[300]
    r = order(x, q, strategy="runs", method=method)
    qsim = r.query_similarity
    assert sorted(r.order.tolist()) == list(range(600)) and r.order[0] == r.root == int(np.argmax(qsim))
    head = np.flatnonzero(qsim >= qsim.max() - RUNS_HEAD)
    assert 1 < len(head) < 600
    assert r.order[:len(head)].tolist() == np.lexsort((np.arange(600), -qsim))[:len(head)].tolist()


def test_a_given_root_comes_first_and_no_query_ranks_by_centrality():
    x = clustered(300, seed=4)
    assert order(x, x[5], strategy="runs", root=17).order[0] == 17
    central = order(x, strategy="runs")
    assert central.order[0] == central.root == order(x).root


def labelled_corpora():
    notes = sorted(NOTES.glob("*.md"))
    corpora = [{"name": "examples/notes",
                "chunks": [{"topic": p.name.split("-")[0], "text": p.read_text(encoding="utf-8")} for p in notes],
                "questions": [{"text": t} for t in ("Why did my loaf not rise in the oven?",
                                                    "How does a request reach a pod through an Ingress?",
                                                    "How did Roman aqueducts carry water downhill?",
                                                    "What temperature should the public baths be?")]}]
    return corpora + json.loads((FIXTURES / "topic_corpora.json").read_text(encoding="utf-8"))["corpora"]


def topic_runs(seq, labels):
    return 1 + sum(labels[a] != labels[b] for a, b in itertools.pairwise(seq))


def test_every_topic_is_read_as_one_run(embedder):
    split = {"dense": 0, "dense_tree": 0}
    for corpus in labelled_corpora():
        texts = [c["text"] for c in corpus["chunks"]]
        labels = [c["topic"] for c in corpus["chunks"]]
        vectors = embedder.embed(texts)
        for question in corpus["questions"]:
            q = embedder.embed([question["text"]])[0]
            seq = order(vectors, q, strategy="runs").order.tolist()
            assert topic_runs(seq, labels) == len(set(labels)), (corpus["name"], question["text"],
                                                                 [labels[i] for i in seq])
            for other in split:
                split[other] += topic_runs(order(vectors, q, strategy=other).order.tolist(), labels) > len(set(labels))
    assert min(split.values()) > 0  # the corpora are not trivially read in runs: the other orders split topics
