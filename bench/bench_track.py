"""Topic forest: time to place one turn in conversations of 10 to 10,000 turns, embedding
excluded (precomputed vectors, the decision alone) and included (``Forest.add``: the model embeds
the turn), with the shipped learned decider. The topics are synthetic: 20 topics, the topic
changing every 2-6 turns; and, the worst case for the number of trees, every turn a topic of its
own.

    python -m pytest bench/bench_track.py

The save after each turn (the service's, with a conversations folder): ``save_turn`` (one line
appended to the journal, the file rewritten after as many turns as it holds) against ``save``
(the whole file every time), the mean over 130 turns. And the service's whole turn over loopback:
``POST /v1/conversations/{id}/turns`` to ``chunktree serve --conversations DIR`` holding a
conversation of 100 and of 10,000 turns (HTTP, embedding, decision and the journal save), 130 turns
each after one untimed turn that loads the conversation.

The context for the next turn, ``Forest.context(1024)``, after conversations of 300, 3,000 and
10,000 turns (dense and BM25 scores of every earlier turn, the path, the topic lines).

Goals (reported, not asserted): p50 <= 1 ms per decision at 1,000 turns, embedding excluded; a
turn (``add``) at 3,000 turns within 2.5x of one at 300, and at 10,000 within 2x of one at 100;
its save at 10,000 turns within 2x of one at 100; the context at 3,000 turns under 50 ms.
"""

import time

import httpx
import numpy as np
import pytest
from bench_serve import start_server
from conftest import summary

from chunktree import Embedder
from chunktree.engine.datasets import synthetic_embeddings
from chunktree.track import Forest

SIZES = (10, 100, 1000, 10000)
TIMED = 50


@pytest.fixture(scope="module")
def embedder():
    e = Embedder()
    e.warmup()
    return e


def conversation(n, seed=0, distinct=False):
    """n + TIMED vectors whose topic changes every 2-6 turns (``distinct``: every turn a random
    direction), and a text for each."""
    rng = np.random.default_rng(seed)
    if distinct:
        v = rng.normal(size=(n + TIMED, 384)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return v, [f"Subject {i}: an entirely separate question about item {i}." for i in range(n + TIMED)]
    pool = synthetic_embeddings(20 * 400, topics=20, shared=0.0, noise=0.5, seed=seed).reshape(20, 400, -1)
    topic, left, rows = 0, 0, []
    for i in range(n + TIMED):
        if left == 0:
            topic, left = int(rng.integers(20)), int(rng.integers(2, 7))
        rows.append(pool[topic, i % 400])
        left -= 1
    return np.array(rows), [f"Turn {i} about topic words {i % 7} and more." for i in range(n + TIMED)]


def timed_turns(results, embedder, n, kind, place, distinct=False):
    """A forest of n turns, then TIMED more placed by ``place(forest, i, vectors, texts)``, timed."""
    vectors, texts = conversation(n, distinct=distinct)
    forest = Forest(embedder)
    for i in range(n):
        forest._place(texts[i], None, vectors[i], vectors[i])
    times = []
    for i in range(n, n + TIMED):
        t0 = time.perf_counter()
        place(forest, i, vectors, texts)
        times.append(time.perf_counter() - t0)
    results["track"][(kind, n)] = (float(np.median(times)), float(np.percentile(times, 99)), len(forest.trees))


@pytest.mark.parametrize("n", SIZES)
def test_decision_without_embedding(results, embedder, n):
    timed_turns(results, embedder, n, "decision", lambda f, i, v, t: f._place(t[i], None, v[i], v[i]))


@pytest.mark.parametrize("n", SIZES)
def test_decision_distinct_topics(results, embedder, n):
    timed_turns(results, embedder, n, "distinct", lambda f, i, v, t: f._place(t[i], None, v[i], v[i]), True)


@pytest.mark.parametrize("n", (100, 300, 3000, 10000))
def test_add_with_embedding(results, embedder, n):
    timed_turns(results, embedder, n, "add",
                lambda f, i, v, t: f.add(f"A new question number {i} about the whale and the ship?", "An answer."))


@pytest.mark.parametrize("n", (300, 3000, 10000))
def test_context(results, embedder, n):
    """``Forest.context(1024)`` after each of TIMED more turns."""
    vectors, texts = conversation(n)
    forest = Forest(embedder)
    for i in range(n):
        forest._place(texts[i], None, vectors[i], vectors[i])
    times = []
    for i in range(n, n + TIMED):
        forest._place(texts[i], None, vectors[i], vectors[i])
        t0 = time.perf_counter()
        forest.context(1024)
        times.append(time.perf_counter() - t0)
    results["track"][("context", n)] = (float(np.median(times)), float(np.percentile(times, 99)), len(forest.trees))


@pytest.mark.parametrize("n", (100, 10000))
def test_save_turn(results, embedder, n, tmp_path):
    """The service's save after a turn: ``Forest.save_turn`` (journal) against ``Forest.save``
    (the whole file), each over the same 130 turns after n, so that rewrites are included."""
    vectors, texts = conversation(n + 130)
    forest = Forest(embedder)
    for i in range(n):
        forest._place(texts[i], None, vectors[i], vectors[i])
    forest.save(tmp_path / "f.json")
    turns, whole = [], []
    for i in range(n, n + 130):
        forest._place(texts[i], None, vectors[i], vectors[i])
        t0 = time.perf_counter()
        forest.save_turn(tmp_path / "f.json")
        turns.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        forest.save(tmp_path / "g.json")
        whole.append(time.perf_counter() - t0)
    results["track"][("save_turn", n)] = (float(np.mean(turns)), float(np.percentile(turns, 99)), len(forest.trees))
    results["track"][("save", n)] = (float(np.mean(whole)), float(np.percentile(whole, 99)), len(forest.trees))


def test_service_turn(results, embedder, tmp_path):
    """A turn over loopback in conversations of 100 and 10,000 turns, one server holding both."""
    folder = tmp_path / "conversations"
    folder.mkdir()
    for n in (100, 10000):
        vectors, texts = conversation(n)
        forest = Forest(embedder)
        for i in range(n):
            forest._place(texts[i], None, vectors[i], vectors[i])
        forest.save(folder / f"c{n}.json")
    proc, url = start_server("--conversations", str(folder), "--max-turns", "20000")
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            for n in (100, 10000):
                times = []
                for i in range(131):
                    t0 = time.perf_counter()
                    r = client.post(f"/v1/conversations/c{n}/turns",
                                    json={"user": f"A new question number {i} about the whale and the ship?"})
                    times.append(time.perf_counter() - t0)
                    assert r.status_code == 200, r.text
                trees = len(client.get(f"/v1/conversations/c{n}").json()["forest"]["trees"])
                results["track"][("service", n)] = (float(np.median(times[1:])), float(np.percentile(times[1:], 99)),
                                                    trees)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@summary
def _report(results):
    r = results.get("track", {})
    lines = []
    for (kind, n), (p50, p99, trees) in sorted(r.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        what = {"decision": "decision, embedding excluded", "distinct": "decision, every turn a new topic",
                "add": "add(), embedding included", "save_turn": "save_turn() (journal), mean",
                "save": "save() (whole file), mean", "service": "service turn over loopback",
                "context": "context(1024)"}[kind]
        middle = "mean" if kind.startswith("save") else "p50"
        lines.append(f"track {what:30s} at {n:>5} turns: {middle} {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms "
                     f"({trees} trees)")
    return lines
