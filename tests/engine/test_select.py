"""select(): coverage, representatives, K from a token budget or the elbow, provenance, errors."""

import numpy as np
import pytest
from conftest import unit_topics

from chunktree import Chunk, select


def topics(n=300, d=24, k=6, seed=0):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, k, n)
    x = 4 * rng.standard_normal((k, d))[truth] + rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), truth


def test_every_chunk_in_exactly_one_cluster_and_nearest_representatives():
    x, _ = topics()
    r = select(x, 6, per_cluster=3)
    members = np.concatenate([c.members for c in r.clusters])
    assert sorted(members.tolist()) == list(range(300))  # coverage, no overlap
    assert sum(c.size for c in r.clusters) == 300
    for c in r.clusters:
        assert r.labels[list(c.members)].tolist() == [c.id] * c.size
        d = np.linalg.norm(x[list(c.members)] - r.centers[c.id], axis=1)
        want = np.array(c.members)[np.lexsort((c.members, d))][:3]
        assert list(c.representatives) == want.tolist()  # nearest to the centre, nearest first
        np.testing.assert_allclose(c.distances, np.sort(d)[:3], atol=1e-5)
    firsts = [min(c.representatives) for c in r.clusters]
    assert firsts == sorted(firsts)  # document order
    assert r.representatives == [i for c in r.clusters for i in c.representatives]
    assert set(r.timings) == {"embed_s", "cluster_s", "total_s"} and not set(r.timings) & set(r.params)


def test_to_dict_is_json_ready():
    import json

    x, _ = topics(n=60, seed=8)
    r = select(x, 4, per_cluster=2)
    doc = json.loads(json.dumps(r.to_dict()))  # plain JSON types only
    assert (doc["k"], doc["n_clusters"], doc["n_chunks"]) == (4, len(r.clusters), 60)
    assert [c["members"] for c in doc["clusters"]] == [c.members.tolist() for c in r.clusters]
    reps = [[rep["id"] for rep in c["representatives"]] for c in doc["clusters"]]
    assert reps == [list(c.representatives) for c in r.clusters]
    assert all(rep["source"] is None and rep["text"] is None for c in doc["clusters"] for rep in c["representatives"])
    # each stage's peak memory, as order gives it (none where the platform has no /proc)
    assert set(r.peak_memory_mb) in ({"embed", "cluster"}, set()) and doc["memory_mb"] == r.peak_memory_mb
    assert all(mb > 0 for mb in r.peak_memory_mb.values())


def test_recovers_separated_topics():
    x, truth = topics(seed=1)
    r = select(x, 6)
    assert {truth[c.representatives[0]] for c in r.clusters} == set(range(6))
    for c in r.clusters:
        assert len(set(truth[list(c.members)].tolist())) == 1


def test_k_from_token_budget():
    x, _ = topics(n=100, seed=3)
    tokens = np.full(100, 200)
    assert select(x, budget_tokens=2000, tokens=tokens).k == 10
    assert select(x, budget_tokens=2000, tokens=tokens, per_cluster=2).k == 5
    assert select(x, budget_tokens=10**9, tokens=tokens).k == 100


def test_k_at_the_elbow():
    x, _ = topics(n=600, k=6, seed=4)
    r = select(x, "elbow")
    assert 4 <= r.k <= 12
    assert r.k in r.params["elbow_inertia"]


def test_k_equals_n_and_one():
    x, _ = topics(n=20, seed=5)
    assert sorted(select(x, 20).representatives) == list(range(20))
    (only,) = select(x, 1).clusters
    assert only.size == 20


def test_chunks_keep_provenance(embedder):
    texts = ["Whales dive deep.", "The sperm whale hunts squid.", "Ships need sails.", "Sails catch the wind."]
    chunks = [Chunk(id=i, text=t, source=f"doc{i}.txt", index=0, start=0, end=len(t)) for i, t in enumerate(texts)]
    r = select(chunks, 2, embedder=embedder)
    assert [c.chunks[0] for c in r.clusters] == [chunks[c.representatives[0]] for c in r.clusters]
    by_topic = sorted(sorted(c.members) for c in r.clusters)
    assert by_topic == [[0, 1], [2, 3]]
    # One token per word or mark, special tokens not counted: 5, 5, 4, 4 (mean 4.5).
    short = ["the whale is near .", "a ship sails far .", "oil lights the lamp", "the sea is cold"]
    assert [len(embedder.tokenizer.encode(t, add_special_tokens=False).tokens) for t in short] == [5, 5, 4, 4]
    assert select(short, budget_tokens=9, embedder=embedder).k == 2      # 9 // 4.5
    assert select(short, budget_tokens=20, embedder=embedder).k == 4     # 20 // 4.5, capped at n


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 0}, r"k must be >= 1; got 0"),
    ({"k": True}, "k must be an int; got True"),
    ({"k": 51}, r"k must be in \[1, n_chunks=50\]; got 51"),
    ({"k": "many"}, "k must be a positive int, 'elbow' or None; got 'many'"),
    ({}, "give k"),
    ({"budget_tokens": 100}, "with embeddings, pass tokens="),
    ({"budget_tokens": 10, "tokens": np.full(50, 100)}, "below one representative"),
    ({"budget_tokens": 100, "tokens": np.full(3, 10)}, "tokens must be 50 non-negative ints"),
    ({"k": 3, "per_cluster": 0}, "per_cluster must be >= 1; got 0"),
    ({"k": 3, "seed": -1}, r"seed must be in \[0, 9223372036854775807\]; got -1"),
    ({"k": 3, "coverage": "yes"}, "coverage must be a bool; got 'yes'"),
    ({"k": 3, "balance": True, "coverage": True}, "balance and coverage are two ways of choosing the clusters"),
])
def test_bad_input(kwargs, message):
    x, _ = topics(n=50, seed=6)
    with pytest.raises((ValueError, TypeError), match=message):
        select(x, **kwargs)


def test_balance_gives_small_topics_their_own_cluster():
    rng = np.random.default_rng(7)
    d = 24
    centres = 6 * rng.standard_normal((5, d))
    sizes = [600, 12, 12, 12, 12]  # one dominant topic, four small ones
    truth = np.repeat(np.arange(5), sizes)
    x = centres[truth] + rng.standard_normal((len(truth), d))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    for seed in range(3):
        r = select(x, 5, balance=True, seed=seed)
        assert {int(truth[c.representatives[0]]) for c in r.clusters} == set(range(5))
        members = sorted(i for c in r.clusters for i in c.members)
        assert members == list(range(len(truth)))
        for c in r.clusters:  # representatives still nearest their centre
            d_all = np.linalg.norm(x[list(c.members)] - r.centers[c.id], axis=1)
            assert c.distances[0] == pytest.approx(d_all.min(), abs=1e-5)


def test_coverage_represents_topics_that_plain_k_means_leaves_out():
    # Three big spread-out topics and five small tight ones, K = the eight topics: plain K-means
    # spends centres on the big topics' spread and leaves small ones out; coverage represents as many
    # topics for every seed and more over ten seeds. Every chunk is in exactly one cluster, nearest
    # its representative.
    rng = np.random.default_rng(11)
    d = 24
    centres = 5 * rng.standard_normal((8, d))
    sizes = [300, 300, 300, 15, 15, 15, 15, 15]
    spread = [2.5, 2.5, 2.5, 0.6, 0.6, 0.6, 0.6, 0.6]
    truth = np.repeat(np.arange(8), sizes)
    x = centres[truth] + np.repeat(spread, sizes)[:, None] * rng.standard_normal((len(truth), d))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    covered = {"plain": [], "coverage": []}
    for seed in range(10):
        for name, flag in (("plain", False), ("coverage", True)):
            r = select(x, 8, coverage=flag, seed=seed)
            covered[name].append(len({int(truth[c.representatives[0]]) for c in r.clusters}))
            assert sorted(i for c in r.clusters for i in c.members) == list(range(len(truth)))
            if flag:
                assert r.params["coverage"] is True
                for c in r.clusters:  # every member is nearest its own cluster's representative
                    rep = x[list(r.representatives)]
                    own = [r.representatives.index(c.representatives[0])] * len(c.members)
                    assert (np.argmax(x[list(c.members)] @ rep.T, axis=1) == own).all()
    assert all(c >= p for c, p in zip(covered["coverage"], covered["plain"])), covered
    assert sum(covered["coverage"]) > sum(covered["plain"]), covered


def test_identical_chunks_make_one_cluster_and_the_result_says_so(caplog):
    x = np.tile(unit_topics(1, d=16)[0], (20, 1))
    with caplog.at_level("WARNING"):
        r = select(x, 20)
    assert len(r.clusters) == 1 and r.clusters[0].size == 20 and r.clusters[0].representatives == (0,)
    assert (r.params["distinct_chunks"], r.params["duplicates"]) == (1, 19)
    assert r.to_dict()["n_clusters"] == 1 and "only 1 of the 20 chunks are distinct" in caplog.text


def test_duplicates_share_a_cluster_and_never_represent_one():
    base, _ = unit_topics(60, d=16, topics=4, seed=3)
    rng = np.random.default_rng(4)
    copies = rng.integers(0, 60, 40)
    x = np.concatenate([base, base[copies]])  # rows 60.. repeat earlier rows exactly
    for flags in ({}, {"balance": True}, {"coverage": True}):
        r = select(x, 6, per_cluster=4, **flags)
        for i, j in zip(range(60, 100), copies):
            assert r.labels[i] == r.labels[j]
        reps = r.representatives
        assert all(i < 60 for i in reps) and len({x[i].tobytes() for i in reps}) == len(reps)
        assert r.params["distinct_chunks"] == len({row.tobytes() for row in x})
        assert r.params["duplicates"] == 100 - r.params["distinct_chunks"]


def test_select_mean_distance_is_the_members_mean_distance_to_their_centre():
    x, _ = unit_topics(300, topics=4, seed=3)
    result = select(x, 4)
    for cluster, center in zip(result.clusters, result.centers):
        want = np.linalg.norm(x[cluster.members] - center, axis=1).mean()
        assert cluster.mean_distance == pytest.approx(want, rel=1e-4)
    assert {"mean_distance"} <= set(result.to_dict()["clusters"][0])
