"""Which earlier turns the next answer most likely needs: each turn's relevance to the current one.

For every earlier turn ``j`` and the current node ``c``, five features (``RELEVANCE_FEATURES``):

- ``same_tree``: ``j`` is in ``c``'s topic tree;
- ``in_stretch``: every turn from ``j`` to ``c`` is in that tree (the topic's current stretch,
  where a follow-up such as "And how many stretch and folds?" finds what it leans on);
- ``similarity``: the cosine of the two turns' vectors (user and assistant text together);
- ``log_turns_ago``: ``log(1 + c - j)``;
- ``tree_fit``: the best similarity of ``c`` to any turn of ``j``'s tree, so that the turns of a
  topic that was split over several trees come back together.

A logistic model (``RELEVANCE_WEIGHTS``, ``RELEVANCE_BIAS``) maps them to the probability that
``j`` is of the current turn's topic. ``choose`` fills a token budget with the current turn and
then the most probable turns; without a budget it takes every turn at or above
``RELEVANCE_KEEP``. Arrays in, arrays out: ``Forest.context`` calls it with its vectors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

RELEVANCE_FEATURES = ("same_tree", "in_stretch", "similarity", "log_turns_ago", "tree_fit")
# Fitted by bench/fit_context.py: a logistic regression of "same story" on these features, over
# every (earlier turn, turn) pair of 30 dialogues each of 40 and 80 turns stitched from the first
# half of the CoQA stories and of the SQuAD-Shifts articles, placed by the shipped decider.
RELEVANCE_WEIGHTS = np.array([2.43, 0.43, 7.86, -0.63, 3.18])
RELEVANCE_BIAS = -3.49
RELEVANCE_KEEP = 0.5  # without a budget, the context holds every turn at least this relevant


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


def relevance_features(vectors: np.ndarray, tree_of: np.ndarray, current: int) -> np.ndarray:
    """The ``RELEVANCE_FEATURES`` of every node against node ``current`` (n x 5, float64; the row
    of ``current`` itself is computed like the others and not used). ``vectors``: the n nodes'
    unit vectors in turn order; ``tree_of``: each node's tree id."""
    n = len(vectors)
    sims = vectors @ vectors[current]
    same = tree_of == tree_of[current]
    outside = np.flatnonzero(~same[:current])
    stretch_start = int(outside[-1]) + 1 if outside.size else 0
    in_stretch = (np.arange(n) >= stretch_start) & same
    others = sims.astype(np.float64).copy()
    others[current] = -np.inf  # the current turn fits its own tree perfectly: leave it out
    best = np.full(int(tree_of.max()) + 1, -1.0)
    np.maximum.at(best, tree_of, others)
    ago = np.log1p(np.abs(current - np.arange(n)))
    return np.column_stack([same, in_stretch, sims, ago, best[tree_of]]).astype(np.float64)


def relevance(features: np.ndarray) -> np.ndarray:
    """The probability that each row's turn is of the current turn's topic."""
    return 1.0 / (1.0 + np.exp(-(features @ RELEVANCE_WEIGHTS + RELEVANCE_BIAS)))


def reason(row: np.ndarray, p: float) -> str:
    """Why a turn is in the context, from its features and relevance."""
    same, stretch, sim, ago, fit = row
    where = "this stretch of the topic" if stretch else "this topic" if same else f"another tree (fit {fit:.2f})"
    turns_ago = round(float(np.expm1(ago)))
    return f"relevance {p:.2f}: {where}, similarity {sim:.2f}, {turns_ago} turn{'' if turns_ago == 1 else 's'} ago"


def choose(p: np.ndarray, tokens: np.ndarray, current: int, budget: int | None) -> list[int]:
    """The turns of the context, most relevant first: the current turn, then by descending ``p``
    (ties: the newer first) each turn that still fits ``budget`` (a turn that does not is passed
    over for smaller ones; none when the current turn alone does not fit); without a budget
    every turn with ``p >= RELEVANCE_KEEP``."""
    order = [current, *(j for j in np.lexsort((-np.arange(len(p)), -p)).tolist() if j != current)]
    if budget is None:
        return [j for j in order if j == current or p[j] >= RELEVANCE_KEEP]
    if int(tokens[current]) > budget:
        return []
    held, used = [], 0
    for j in order:
        if used + int(tokens[j]) <= budget:
            held.append(j)
            used += int(tokens[j])
    return held
