"""Fitting the learned topic decider (``chunktree train-track``).

``fit`` learns the weights of a ``learned.LearnedDecider`` from dialogues with a topic per turn
(``data.LabelledDialogue``), by placing every turn where its gold topic says (teacher forcing) and
recording each tree's features and whether it was the right one; then it chooses the decider's
``return_similarity`` on those of the dialogues that have returns.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, integer, number, positive_int
from chunktree.engine.embedding import embed_texts
from chunktree.progress import Progress
from chunktree.track.data import LabelledDialogue, has_returns, labelled_turns
from chunktree.track.decide import Thresholds
from chunktree.track.evaluate import run_forest, score_dialogue
from chunktree.track.forest import Forest
from chunktree.track.learned import DEFAULT_THRESHOLD, LearnedDecider, n_features

# Chosen by bench/train_track_decider.py's validation split (DialSeg711, TIAGE dev) among wider
# networks, weaker L2 and the logistic regression.
DEFAULT_HIDDEN = 16
DEFAULT_L2 = 300.0
# Below this many turn-tree pairs ``fit`` makes a logistic regression whatever ``hidden`` says: on
# fewer the network does no better, and on a few short chats its units shrink to nothing.
MIN_NETWORK_PAIRS = 2000
# ``fit`` refuses data with fewer turn-tree pairs or topic changes than these: nothing to learn from.
MIN_PAIRS = 20
MIN_CHANGES = 2


def _standardised(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The features' mean and scale (the constant first column left as it is), the standardised
    features, the labels and the row weights scaled to a mean of 1, all float64."""
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
    mean[0], scale[0] = 0.0, 1.0
    r = np.ones(len(y)) if weights is None else np.asarray(weights, np.float64) / np.mean(weights)
    return mean, scale, ((x - mean) / scale).astype(np.float64), y.astype(np.float64), r


def fit_weights(x: np.ndarray, y: np.ndarray, l2: float = DEFAULT_L2,
                weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """L2-regularised logistic regression on standardised features (L-BFGS), each row weighted by
    ``weights`` (default 1; they are scaled to a mean of 1); the constant column (the first) is
    left unscaled and unpenalised. Returns weights, mean and scale."""
    from scipy.optimize import minimize

    number(l2, "l2", 0.0)
    mean, scale, z, yy, r = _standardised(x, y, weights)
    penalty = np.ones(z.shape[1])
    penalty[0] = 0.0

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        s = z @ w
        p = 1.0 / (1.0 + np.exp(-np.clip(s, -60, 60)))
        value = float(np.mean(r * (np.logaddexp(0.0, s) - yy * s)) + 0.5 * l2 * np.sum(penalty * w * w) / len(yy))
        return value, z.T @ (r * (p - yy)) / len(yy) + l2 * penalty * w / len(yy)

    w = minimize(loss, np.zeros(z.shape[1]), jac=True, method="L-BFGS-B", options={"maxiter": 1000}).x
    return w, mean, scale


def fit_network(x: np.ndarray, y: np.ndarray, hidden: int = DEFAULT_HIDDEN, l2: float = DEFAULT_L2,
                weights: np.ndarray | None = None, seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One hidden layer of ``hidden`` tanh units and a logistic output, on standardised features,
    by L-BFGS on the row-weighted log loss with an L2 penalty on every weight but the output bias;
    the first layer starts from Gaussian weights (``seed``) scaled by 1/sqrt(features). Returns
    the output weights (bias first), mean, scale, hidden weights and hidden bias."""
    from scipy.optimize import minimize

    number(l2, "l2", 0.0)
    positive_int(hidden, "hidden")
    mean, scale, z, yy, r = _standardised(x, y, weights)
    n, d = z.shape
    rng = np.random.default_rng(seed)
    start = np.concatenate([rng.standard_normal(d * hidden) / np.sqrt(d), np.zeros(hidden),
                            0.1 * rng.standard_normal(hidden + 1)])

    def unpack(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return p[:d * hidden].reshape(d, hidden), p[d * hidden:(d + 1) * hidden], p[(d + 1) * hidden:]

    def loss(p: np.ndarray) -> tuple[float, np.ndarray]:
        w1, b1, w2 = unpack(p)
        h = np.tanh(z @ w1 + b1)
        s = w2[0] + h @ w2[1:]
        q = 1.0 / (1.0 + np.exp(-np.clip(s, -60, 60)))
        value = float(np.mean(r * (np.logaddexp(0.0, s) - yy * s)) + 0.5 * l2 * (np.sum(w1 * w1) + np.sum(w2[1:] ** 2)) / n)
        g_s = r * (q - yy) / n
        g_w2 = np.concatenate([[g_s.sum()], h.T @ g_s + l2 * w2[1:] / n])
        g_h = np.outer(g_s, w2[1:]) * (1.0 - h * h)
        return value, np.concatenate([(z.T @ g_h + l2 * w1 / n).ravel(), g_h.sum(axis=0), g_w2])

    w1, b1, w2 = unpack(minimize(loss, start, jac=True, method="L-BFGS-B", options={"maxiter": 500}).x)
    return w2, mean, scale, w1, b1


def teacher_forced(dialogue: LabelledDialogue, user_vectors: np.ndarray, node_vectors: np.ndarray,
                   embedder: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every turn placed where its gold topic says; for each turn after the first, each tree's
    features and whether it is the turn's topic."""
    forest = Forest(embedder, decider="thresholds")
    tree_of: dict[str, int] = {}
    rows, labels = [], []
    for i, (user, assistant, topic) in enumerate(dialogue.turns):
        gold = tree_of.get(topic)
        if forest.trees:
            candidates, x = forest.features(user_vectors[i], user)
            rows.append(x)
            labels.append(np.array([c.tree == gold for c in candidates], np.float32))
        tree_of[topic] = forest.force(user, assistant, node_vectors[i], gold).tree
    if not rows:
        return np.zeros((0, n_features(embedder.dim)), np.float32), np.zeros(0, np.float32)
    return np.concatenate(rows), np.concatenate(labels)


def embed_dialogues(dialogues: list[LabelledDialogue], embedder: Any, cache: Any = None,
                    progress: Progress = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each dialogue's user vectors and node vectors (user and assistant text together), in one pass."""
    texts = [t for d in dialogues for user, assistant, _ in d.turns
             for t in (user, user if not assistant else f"{user}\n{assistant}")]
    vectors, _ = embed_texts(texts, embedder, cache, progress=progress, prompt="query")
    out, start = [], 0
    for d in dialogues:
        v = vectors[start:start + 2 * len(d.turns)]
        out.append((v[0::2], v[1::2]))
        start += 2 * len(d.turns)
    return out


RETURN_GRID = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


def choose_return_similarity(decider: LearnedDecider, dialogues: list[LabelledDialogue],
                             vectors: list[tuple[np.ndarray, np.ndarray]], embedder: Any) -> tuple[float | None, list[Any]]:
    """The ``RETURN_GRID`` value (or None) with the best mean of topic assignment and return
    accuracy on the dialogues that have returns, and every value's scores (with boundary F1).
    Assignment weighs against returns that are not: a new topic sent back to an earlier tree
    still counts as a boundary, so boundary F1 does not see it, but it puts two topics in one
    tree."""
    chosen = [(d, v) for d, v in zip(dialogues, vectors) if has_returns(d)]
    if not chosen:
        return None, []
    rows: list[dict[str, Any]] = []
    for value in (None, *RETURN_GRID):
        candidate = dataclasses.replace(decider, return_similarity=value)
        scores = []
        for d, (u, nv) in chosen:
            turns = labelled_turns(d)
            trees, _ = run_forest(turns, u, nv, embedder, Thresholds(), decider=candidate)
            scores.append(score_dialogue(turns, trees))
        rows.append({"return_similarity": value,
                     **{k: float(np.nanmean([m[k] for m in scores])) for k in ("assignment", "return_accuracy",
                                                                               "boundary_f1")}})
    best = max(rows, key=lambda r: float(r["assignment"]) + float(r["return_accuracy"]))
    return best["return_similarity"], rows


def fit(dialogues: list[LabelledDialogue], embedder: Any, cache: Any = None, *, hidden: int = DEFAULT_HIDDEN,
        l2: float = DEFAULT_L2, threshold: float = DEFAULT_THRESHOLD, info: dict[str, Any] | None = None,
        progress: Progress = False, seed: int = 0) -> LearnedDecider:
    """Fit a decider on ``dialogues``: the weights (``hidden`` tanh units, started from ``seed``; a
    logistic regression with ``hidden=0`` or on fewer than ``MIN_NETWORK_PAIRS`` turn-tree pairs),
    then ``return_similarity`` on those with returns (None when none has one). ``info["hidden"]``
    says which was made. Data of fewer than ``MIN_PAIRS`` pairs or ``MIN_CHANGES`` topic changes is
    refused with an ``InvalidValueError`` that gives the counts."""
    number(threshold, "threshold", 0.0, 1.0, low_open=True)
    integer(hidden, "hidden", 0)
    integer(seed, "seed", 0)
    number(l2, "l2", 0.0)
    if not dialogues:
        raise InvalidValueError("fit needs at least one dialogue")
    t0 = time.perf_counter()
    vectors = embed_dialogues(dialogues, embedder, cache, progress)
    pairs = [teacher_forced(d, u, v, embedder) for d, (u, v) in zip(dialogues, vectors)]
    x = np.concatenate([p[0] for p in pairs])
    y = np.concatenate([p[1] for p in pairs])
    changes = sum(sum(a[2] != b[2] for a, b in zip(d.turns, d.turns[1:])) for d in dialogues)
    if y.size < MIN_PAIRS or changes < MIN_CHANGES or y.min() == y.max():
        raise InvalidValueError(
            f"{len(dialogues)} dialogue(s) of {sum(len(d.turns) for d in dialogues)} turns give {y.size} turn-tree pairs "
            f"({int(y.sum())} of the turn's own topic) and {changes} topic change(s); a decider needs at least "
            f"{MIN_PAIRS} pairs, {MIN_CHANGES} changes and turns that stay in their topic: nothing was fitted")
    sources = np.concatenate([np.full(len(p[1]), d.source, dtype=object) for d, p in zip(dialogues, pairs)])
    counts = {s: int((sources == s).sum()) for s in set(sources.tolist())}
    row_weights = np.array([1.0 / counts[s] for s in sources])
    if y.size < MIN_NETWORK_PAIRS:
        hidden = 0
    if hidden:
        w, mean, scale, w1, b1 = fit_network(x, y, hidden, l2, row_weights, seed)
        decider = LearnedDecider(w, mean, scale, threshold, hidden_weights=w1, hidden_bias=b1)
    else:
        w, mean, scale = fit_weights(x, y, l2, row_weights)
        decider = LearnedDecider(w, mean, scale, threshold)
    back, grid = choose_return_similarity(decider, dialogues, vectors, embedder)
    made = {"pairs": len(y), "positives": int(y.sum()), "dialogues": len(dialogues), "pairs_by_source": counts,
            "hidden": hidden, "l2": l2, "seed": seed, "threshold": threshold, "return_similarity": back,
            "return_grid": grid,
            "model": embedder.model_id, "fit_seconds": round(time.perf_counter() - t0, 1)}
    return dataclasses.replace(decider, return_similarity=back, info={**made, **(info or {})})
