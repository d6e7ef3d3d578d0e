"""Which earlier turns the next answer most likely needs: each turn's relevance to the current one.

Retrieval is the floor: every earlier turn is scored as a strong retriever scores it, by its
dense similarity to the current turn (or to a question about the conversation) and by BM25 over
their words (``lexical``), each also as a z-score among the earlier turns. The forest adds what
only it knows: the turns next to a strong match (the question a reply answers, the reply to a
question: an answer is often spread over them), the current turn's path in its tree (the turns
it follows on: for a follow-up such as "And how many stretch and folds?" the stretch just before
it, for a return the turns where its topic was left, for a branch the turn it goes back to), and
its topic when that topic is a part of the conversation rather than most of it. For every earlier
turn ``j`` (``RELEVANCE_FEATURES``):

- ``similarity``: the cosine of the two vectors (user and assistant text together);
- ``similarity_z``, ``lexical_z``: the similarity and the BM25 score as z-scores over the earlier
  turns (how far above the conversation's usual level);
- ``neighbour_lift``: how much better than ``j`` itself the best-matching turn among those up to
  ``NEIGHBOURS`` before or after ``j`` and ``j``'s parent in its tree matches (a turn's match:
  ``max(0, similarity_z + LEXICAL_SHARE * lexical_z)``; 0 when none matches better), so that the
  strong match comes before the turns beside it;
- ``tree_fit``: the best similarity of the current turn to any turn of ``j``'s tree;
- ``on_path``, ``path_position``: ``j`` is one of the ``PATH`` nearest ancestors of the current
  turn in its tree, and ``log(k)`` for the k-th of them (recency counts along the path, where it
  cannot bury a strong older match elsewhere); both 0 for a question that is not a turn;
- ``path_strong_match``: ``on_path`` times the best match of any earlier turn: a turn whose words
  and meaning point far back leans less on its path;
- ``same_topic``: ``j`` is in the current turn's tree, times ``max(0, 1 - 3 * share)`` where
  ``share`` is the part of the earlier turns that tree holds: a tree that holds a third of the
  conversation or more says nothing about what a turn needs;
- ``path_jump``: ``on_path`` when the current turn does not follow the turn before it (a return,
  or a question placed at an earlier turn it matches): past the turn it hangs on, its path holds
  the turns that led there, not what it asks about;
- ``path_jump_past``: ``path_jump`` for the turns past the one it hangs on (a return's path holds
  the stretch where its topic was left, a question's the turns before the one it matches);
- ``path_jump_length``: ``path_jump`` times the log of the number of earlier turns: the longer the
  conversation, the smaller the part of it a jump's path is.

A logistic model (``RELEVANCE_WEIGHTS``, ``RELEVANCE_BIAS``, fitted by ``bench/fit_context.py`` on
a mix of conversation kinds) maps them to a relevance. ``choose`` fills a token budget with the
current turn and then the most relevant turns, none below ``RELEVANCE_FLOOR`` (the budget is a
cap, not a target); without a budget it takes every turn at or above ``RELEVANCE_KEEP``. Arrays
in, arrays out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

RELEVANCE_FEATURES = ("similarity", "similarity_z", "lexical_z", "neighbour_lift", "tree_fit", "on_path",
                      "path_position", "path_strong_match", "same_topic", "path_jump", "path_jump_past",
                      "path_jump_length")
# The features' shapes, set by hand and compared on the LoCoMo half (leave one conversation out) and
# the stitched dialogues; same_topic's third of the conversation lies between the share a stitched
# story's tree holds and the share of LoCoMo's largest trees.
LEXICAL_SHARE = 0.5  # a turn's match: its similarity z-score plus this share of its BM25 z-score
NEIGHBOURS = 2  # neighbour_lift looks this many turns before and after
PATH = 6  # on_path: this many ancestors of the current turn
RELEVANCE_WEIGHTS = np.array([2.276, 0.152, 0.169, 0.244, -1.066, 5.669, -0.984, -0.201, 1.256, -1.957, 1.311, -0.333])
RELEVANCE_BIAS = -3.688
# Without a budget the context holds every turn at least RELEVANCE_KEEP relevant; under one, no turn
# less relevant than RELEVANCE_FLOOR. On bench/fit_context.py's pairs the floor keeps 99% of the
# LoCoMo evidence turns and 95-99% of the needed turns of the short dialogues, and leaves out 12-26%
# of the others; RELEVANCE_KEEP keeps 57% of the evidence and 58-76% of the needed turns.
RELEVANCE_KEEP = 0.1
RELEVANCE_FLOOR = 0.02


@dataclass(frozen=True)
class Context:
    """What the next turn gets: ``messages`` (OpenAI chat shape), their ``tokens`` (chunktree's
    convention: content tokens, no special tokens), the node ids of the turns held verbatim
    (conversation order), each one's ``relevance`` (1.0 for the current turn) and ``why`` it is
    there, and whether the budget cut anything (a turn at least ``RELEVANCE_KEEP`` relevant, or a
    line)."""

    messages: list[dict[str, str]]
    tokens: int
    turns: list[int]
    cut: bool
    relevance: list[float]
    why: list[str]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _z(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``values`` as z-scores over the entries where ``mask`` holds (0 where they do not vary)."""
    if mask.sum() < 2:
        return np.zeros(len(values))
    std = float(values[mask].std())
    return (values - float(values[mask].mean())) / std if std > 1e-9 else np.zeros(len(values))


def match(sims: np.ndarray, lexical: np.ndarray, among: np.ndarray) -> np.ndarray:
    """How strongly each turn matches: ``max(0, similarity_z + LEXICAL_SHARE * lexical_z)``, the
    z-scores taken over the turns where ``among`` holds (0 elsewhere)."""
    sim_z, lex_z = _z(sims.astype(np.float64), among), _z(lexical.astype(np.float64), among)
    return np.where(among, np.maximum(0.0, sim_z + LEXICAL_SHARE * lex_z), 0.0)


def relevance_features(sims: np.ndarray, lexical: np.ndarray, tree_of: np.ndarray, parent: np.ndarray,
                       current: int | None) -> np.ndarray:
    """The ``RELEVANCE_FEATURES`` of every node (n x 12, float64) against the current node, or,
    with ``current`` None, against a question that is not a turn. ``sims``: each node's cosine
    with the current node (or the question); ``lexical``: each node's BM25 score for its words;
    ``tree_of``: each node's tree id; ``parent``: each node's parent (-1 for a root). The row of
    ``current`` is computed like the others and not used."""
    n = len(sims)
    earlier = np.ones(n, bool)
    if current is not None:
        earlier[current] = False
    sims = sims.astype(np.float64)
    sim_z, lex_z = _z(sims, earlier), _z(lexical.astype(np.float64), earlier)
    strength = match(sims, lexical, earlier)
    near = np.zeros(n)
    for d in range(1, NEIGHBOURS + 1):
        near[d:] = np.maximum(near[d:], strength[:-d])
        near[:-d] = np.maximum(near[:-d], strength[d:])
    rooted = parent >= 0
    near[rooted] = np.maximum(near[rooted], strength[parent[rooted]])
    best = np.full(int(tree_of.max()) + 1 if n else 0, -1.0)
    np.maximum.at(best, tree_of, np.where(earlier, sims, -np.inf))  # the current turn fits its own tree: left out
    on_path, position, same, jump, length = np.zeros(n), np.zeros(n), np.zeros(n), 0.0, 0.0
    if current is not None:
        jump = float(parent[current] >= 0 and parent[current] != current - 1)
        length = float(np.log(max(1, int(earlier.sum()))))
        node, k = int(parent[current]), 1
        while node >= 0 and k <= PATH:
            on_path[node], position[node] = 1.0, np.log(k)
            node, k = int(parent[node]), k + 1
        mine = tree_of == tree_of[current]
        share = (mine & earlier).sum() / max(1, int(earlier.sum()))
        same = mine * max(0.0, 1.0 - 3.0 * share)
    strongest = float(strength.max()) if n else 0.0
    return np.column_stack([sims, sim_z, lex_z, np.maximum(0.0, near - strength), best[tree_of], on_path, position,
                            on_path * strongest, same, on_path * jump, on_path * jump * (position > 0),
                            on_path * jump * length]).astype(np.float64)


def relevance(features: np.ndarray) -> np.ndarray:
    """The relevance of each row's turn: the probability that the current turn needs it."""
    return 1.0 / (1.0 + np.exp(-np.clip(features @ RELEVANCE_WEIGHTS + RELEVANCE_BIAS, -60, 60)))


def reason(row: np.ndarray, p: float, turns_ago: int) -> str:
    """Why a turn is in the context, from its features and relevance."""
    sim, sim_z, lex_z, lift, _, on_path, position, _, same, *_ = row
    parts = [f"similarity {sim:.2f} ({sim_z:+.1f} sd)"]
    if lex_z >= 1:
        parts.append(f"shares words ({lex_z:+.1f} sd)")
    if lift >= 1:
        parts.append("next to a stronger match")
    if on_path:
        k = round(float(np.exp(position)))
        parts.append("the turn it follows" if k == 1 else f"on its path ({k} back)")
    elif same:
        parts.append("this topic")
    parts.append(f"{turns_ago} turn{'' if turns_ago == 1 else 's'} ago")
    return f"relevance {p:.2f}: " + ", ".join(parts)


def choose(p: np.ndarray, tokens: np.ndarray, current: int | None, budget: int | None) -> list[int]:
    """The turns of the context, most relevant first: the current turn (when there is one), then
    by descending ``p`` (ties: the newer first) each turn of relevance at least ``RELEVANCE_FLOOR``
    that still fits ``budget`` (a turn that does not is passed over for smaller ones; none when
    the current turn alone does not fit); without a budget every turn with ``p >= RELEVANCE_KEEP``."""
    ranked = [j for j in np.lexsort((-np.arange(len(p)), -p)).tolist() if j != current]
    order = ranked if current is None else [current, *ranked]
    if budget is None:
        return [j for j in order if j == current or p[j] >= RELEVANCE_KEEP]
    if current is not None and int(tokens[current]) > budget:
        return []
    held, used = [], 0
    for j in order:
        if j != current and p[j] < RELEVANCE_FLOOR:
            break
        if used + int(tokens[j]) <= budget:
            held.append(j)
            used += int(tokens[j])
    return held
