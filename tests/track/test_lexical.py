"""BM25 over turns (chunktree.engine.lexical) against bm25s, an independent implementation, and
the context's ranking features against plain numpy references."""

import numpy as np
import pytest

from chunktree.engine.lexical import K1, LexicalIndex, lexical_tokens
from chunktree.track.context import NEIGHBOURS, PATH, choose, match, relevance_features


def test_tokens_drop_function_words_and_meet_at_their_stem():
    assert lexical_tokens("The paintings she painted in 2023!") == ["paint", "paint", "2023"]
    assert lexical_tokens("What did they do?") == []  # function words only
    assert lexical_tokens("Adoption agencies") == lexical_tokens("adoption agency")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scores_are_bm25s_lucene_scores(seed):
    """bm25s (method "lucene": the same idf, log(1 + (N - df + 0.5) / (df + 0.5))) leaves out BM25's
    constant (k1 + 1) factor; with it, every score is the same. The index grows one document at
    a time; bm25s indexes the whole corpus at once."""
    import bm25s
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(40)]
    corpus = [list(rng.choice(vocabulary, int(rng.integers(1, 15)))) for _ in range(60)]
    index = LexicalIndex()
    for doc in corpus:
        index.add(doc)
    reference = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    reference.index(corpus, show_progress=False)
    for _ in range(10):
        query = list(rng.choice(vocabulary, 4))
        np.testing.assert_allclose(index.scores(query), (K1 + 1) * reference.get_scores(query), rtol=1e-5, atol=1e-9)
    assert len(index) == 60 and not index.scores(["unknown"]).any()


def test_an_empty_index_scores_nothing():
    assert LexicalIndex().scores(["anything"]).shape == (0,)


def _z(x, mask):
    return (x - x[mask].mean()) / x[mask].std()


def test_features_against_a_plain_reference():
    """Z-scores over the earlier turns, the neighbour match (two turns either side and the parent),
    the path (the current turn's ancestors, nearest first), the topic's share and the path of a turn
    that does not follow the turn before it (past the turn it hangs on; times the log of the earlier
    turns), recomputed here with numpy loops."""
    rng = np.random.default_rng(3)
    n = 40
    sims, lexical = rng.uniform(-0.2, 0.9, n), np.where(rng.random(n) < 0.4, rng.uniform(0, 8, n), 0.0)
    tree_of = np.repeat(np.arange(8), 5)
    parent = np.array([-1 if i % 5 == 0 else i - 1 for i in range(n)])
    parent[20] = 7  # a return: the first turn of tree 4 follows turn 7 (tree 1)... of another tree
    tree_of[20:25] = 1
    current = 24
    x = relevance_features(sims, lexical, tree_of, parent, current)
    earlier = np.arange(n) != current
    strength = np.maximum(0, _z(sims, earlier) + 0.5 * _z(lexical, earlier))
    strength[current] = 0
    np.testing.assert_allclose(x[:, 1], _z(sims, earlier))
    np.testing.assert_allclose(x[:, 2], _z(lexical, earlier))
    np.testing.assert_allclose(match(sims, lexical, earlier), strength)
    for j in range(n):
        around = [k for k in range(j - NEIGHBOURS, j + NEIGHBOURS + 1) if 0 <= k < n and k != j]
        around += [parent[j]] if parent[j] >= 0 else []
        assert x[j, 3] == pytest.approx(max(0.0, max(strength[k] for k in around) - strength[j]))
        best = max(sims[k] for k in range(n) if tree_of[k] == tree_of[j] and k != current)
        assert x[j, 4] == pytest.approx(best)
    path, node = [], parent[current]
    while node >= 0 and len(path) < PATH:
        path.append(node)
        node = parent[node]
    assert path == [23, 22, 21, 20, 7, 6]  # up through the return into the tree it came back to
    assert np.flatnonzero(x[:, 5]).tolist() == sorted(path)
    np.testing.assert_allclose(x[path, 6], np.log(np.arange(1, PATH + 1)))
    # tree 1 holds 9 of the 39 earlier turns: 1 - 3 * 9/39 = 12/39 for its turns, 0 for the others
    np.testing.assert_allclose(x[:, 8], np.where(tree_of == 1, 12 / 39, 0.0))
    assert not x[:, 9:12].any()  # the current turn follows the turn before it: no jump
    back = relevance_features(sims, lexical, tree_of, parent, 20)  # turn 20 hangs on turn 7: a jump
    assert np.flatnonzero(back[:, 9]).tolist() == [5, 6, 7] and (back[:, 9] == back[:, 5]).all()  # up to its root
    assert np.flatnonzero(back[:, 10]).tolist() == [5, 6]  # past turn 7, the one it hangs on
    np.testing.assert_allclose(back[:, 11], back[:, 9] * np.log(n - 1))  # 39 turns besides turn 20
    asked = relevance_features(sims, lexical, tree_of, parent, None)  # a question that is not a turn
    assert not asked[:, 5:12].any() and np.allclose(asked[:, 1], _z(sims, np.ones(n, bool)))


def test_the_budget_is_a_cap_and_the_floor_keeps_weak_turns_out():
    from chunktree.track.context import RELEVANCE_FLOOR, RELEVANCE_KEEP

    assert RELEVANCE_FLOOR < RELEVANCE_KEEP / 2
    p = np.array([0.9, RELEVANCE_FLOOR / 2, 0.6, (RELEVANCE_FLOOR + RELEVANCE_KEEP) / 2, 1.0])
    tokens = np.array([10, 10, 50, 10, 5])
    assert choose(p, tokens, 4, 1000) == [4, 0, 2, 3]  # room for all, but turn 1 is below the floor
    assert choose(p, tokens, 4, 30) == [4, 0, 3]  # turn 2 does not fit and is passed over
    assert choose(p, tokens, 4, None) == [4, 0, 2]  # without a budget: at least RELEVANCE_KEEP
    assert choose(p, tokens, 4, 4) == []  # the current turn alone does not fit
    assert choose(p, tokens, None, 60) == [4, 0, 3]  # a query: no current turn, turn 4 is one like the others
