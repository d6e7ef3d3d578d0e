"""The learned topic decider: the probability that a new turn belongs to each tree of the forest.

For every tree, features of the new turn's vector ``v`` against it: the similarity to the tree's
anchor (the current node for the current tree, else where it was left), the highest similarity
to the recent path ending there, to any node and to the tree's mean; the tree's size, how many
turns ago it was last visited, the turn's content words and the share of them the tree already
holds, whether the turn opens with a connective ("and", "what about") or refers back with a
pronoun; each of these again times "this is the current tree"; and ``v`` times the tree's mean
and times its anchor, element by element (a similarity whose dimensions the model weighs). A
small neural network (one hidden layer of ``DEFAULT_HIDDEN`` tanh units; or, with ``hidden=0``,
a logistic regression) maps them to the probability that the turn is of that tree's topic. The
forest then takes the most probable tree, or a new topic when no tree reaches ``threshold``
(``Forest``, ``decide.decide_learned``).

``fit`` learns the weights from dialogues with a topic per turn, by placing every turn where its
gold topic says (teacher forcing) and recording each tree's features and whether it was the right
one. The package ships a decider fitted on public data (``default_decider``); its ``info`` holds
the data, settings and validation figures that made it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import ChunktreeError, InvalidValueError, integer, json_loads, number, positive_int

FEATURES_VERSION = 2
BASE_FEATURES = ("anchor_similarity", "recent_similarity", "best_similarity", "mean_similarity", "log_tree_size",
                 "log_turns_since", "log_content_words", "word_overlap", "opens_with_connective", "refers_back")
# Chosen by bench/train_track_decider.py's validation split (DialSeg711, TIAGE dev): 16 hidden
# units and L2 300 against 64 units and L2 30 (each way), and against the logistic regression at
# L2 3, 30 and 100.
DEFAULT_HIDDEN = 16
DEFAULT_L2 = 300.0
DEFAULT_THRESHOLD = 0.5
# Below this many turn-tree pairs ``fit`` makes a logistic regression whatever ``hidden`` says:
# fitted on 1,921 pairs of the same sources the network only matched it on validation, and on 20
# pairs (four short chats) its units shrank to nothing and every turn continued one topic.
MIN_NETWORK_PAIRS = 2000


class DeciderFileError(ChunktreeError, ValueError):
    """A decider file cannot be read."""


def tree_features(v: np.ndarray, base: np.ndarray, is_current: np.ndarray, means: np.ndarray,
                  anchors: np.ndarray) -> np.ndarray:
    """The features of the turn vector ``v`` against T trees, one row a tree: ``base`` (T x
    ``len(BASE_FEATURES)``), ``is_current`` (T), the trees' unit mean vectors and anchor vectors
    (T x dim)."""
    current = is_current.astype(np.float32)[:, None]
    return np.hstack([np.ones_like(current), current, base, current * base, v * means, v * anchors]).astype(np.float32)


def n_features(dim: int) -> int:
    """The length of a ``tree_features`` row for ``dim``-dimensional vectors."""
    return 2 + 2 * len(BASE_FEATURES) + 2 * dim


@dataclass(frozen=True)
class LearnedDecider:
    """A model over standardised ``tree_features``: ``z = (features - mean) / scale``.

    Attributes
    ----------
    weights, mean, scale
        without a hidden layer, ``p = sigmoid(z @ weights)``; with one,
        ``p = sigmoid(weights[0] + tanh(z @ hidden_weights + hidden_bias) @ weights[1:])``.
    threshold
        the least probability that keeps a turn in an existing tree; below it, a new topic.
    return_similarity
        below ``threshold``, a turn still returns to another tree whose similarity (``fit``)
        reaches this (None: never). Public segmentation data holds no returns, so the model alone
        rarely returns; ``fit`` chooses this on its dialogues that have returns.
    info
        how it was made: data, settings, validation figures.
    hidden_weights, hidden_bias
        the hidden layer (features x units, units), or None for a logistic regression.
    """

    weights: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    threshold: float = DEFAULT_THRESHOLD
    return_similarity: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    hidden_weights: np.ndarray | None = None
    hidden_bias: np.ndarray | None = None

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """The probability of each row of ``features`` (one row per tree)."""
        z = (features - self.mean) / self.scale
        if self.hidden_weights is None:
            s = z @ self.weights
        else:
            s = self.weights[0] + np.tanh(z @ self.hidden_weights + self.hidden_bias) @ self.weights[1:]
        return 1.0 / (1.0 + np.exp(-np.clip(s, -60, 60)))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the decider to ``path`` (an ``.npz`` file, whatever its name)."""
        arrays: dict[str, Any] = {
            "weights": self.weights, "mean": self.mean, "scale": self.scale, "threshold": self.threshold,
            "return_similarity": np.nan if self.return_similarity is None else self.return_similarity,
            "features_version": FEATURES_VERSION, "info": json.dumps(self.info)}
        if self.hidden_weights is not None:
            arrays.update(hidden_weights=self.hidden_weights, hidden_bias=self.hidden_bias)
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LearnedDecider:
        """Read a decider written by ``save`` (``chunktree train-track``)."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as f:
                arrays = {k: f[k] for k in ("weights", "mean", "scale", "threshold", "return_similarity",
                                            "features_version", "info")}
                hidden = (np.asarray(f["hidden_weights"], np.float64), np.asarray(f["hidden_bias"], np.float64)) \
                    if "hidden_weights" in f.files else None
        except (OSError, ValueError, KeyError) as exc:
            raise DeciderFileError(f"{path}: not a decider file written by 'chunktree train-track' ({exc})") from None
        if int(arrays["features_version"]) != FEATURES_VERSION:
            raise DeciderFileError(f"{path}: features version {int(arrays['features_version'])}; this chunktree "
                                   f"computes version {FEATURES_VERSION}: fit it again with 'chunktree train-track'")
        w, m, s = (np.asarray(arrays[k], np.float64) for k in ("weights", "mean", "scale"))
        shaped = w.ndim == m.ndim == s.ndim == 1 and m.shape == s.shape
        if hidden is None:
            shaped = shaped and w.shape == m.shape
        else:
            units = hidden[1].shape[0] if hidden[1].ndim == 1 else -1
            shaped = shaped and hidden[0].shape == (m.shape[0], units) and w.shape == (units + 1,)
        if not shaped or not all(np.isfinite(a).all() for a in (w, *(hidden or ()))) or not (s > 0).all():
            shapes = ", ".join(str(a.shape) for a in (w, m, s, *(hidden or ())))
            raise DeciderFileError(f"{path}: damaged weights (shapes {shapes})")
        back = float(arrays["return_similarity"])
        return cls(w, m, s, float(arrays["threshold"]), None if np.isnan(back) else back, json.loads(str(arrays["info"])),
                   *(hidden or (None, None)))

    def check(self, dim: int) -> None:
        """Refuse a decider fitted on vectors of another dimension."""
        if self.mean.shape[0] != n_features(dim):
            raise InvalidValueError(f"the decider expects {(self.mean.shape[0] - n_features(0)) // 2}-dimensional "
                                    f"vectors; the embedder makes {dim}")


@functools.lru_cache(maxsize=1)
def default_decider() -> LearnedDecider:
    """The decider shipped with chunktree (``chunktree/data/track_decider.npz``)."""
    return LearnedDecider.load(Path(str(resources.files("chunktree") / "data" / "track_decider.npz")))


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


@dataclass(frozen=True)
class LabelledDialogue:
    """A dialogue with a gold topic per turn: ``turns`` of (user, assistant or None, topic);
    ``source`` names where it came from (``fit`` gives every source the same weight)."""

    id: str
    turns: list[tuple[str, str | None, str]]
    source: str = ""


def teacher_forced(dialogue: LabelledDialogue, user_vectors: np.ndarray, node_vectors: np.ndarray,
                   embedder: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every turn placed where its gold topic says; for each turn after the first, each tree's
    features and whether it is the turn's topic."""
    from chunktree.track.forest import Forest

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
                    progress: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each dialogue's user vectors and node vectors (user and assistant text together), in one pass."""
    from chunktree.engine.embedding import embed_texts

    texts = [t for d in dialogues for user, assistant, _ in d.turns
             for t in (user, user if not assistant else f"{user}\n{assistant}")]
    vectors, _ = embed_texts(texts, embedder, cache, progress=progress)
    out, start = [], 0
    for d in dialogues:
        v = vectors[start:start + 2 * len(d.turns)]
        out.append((v[0::2], v[1::2]))
        start += 2 * len(d.turns)
    return out


RETURN_GRID = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


def has_returns(dialogue: LabelledDialogue) -> bool:
    """Whether a topic comes back after another one."""
    seen, last = set(), None
    for _, _, topic in dialogue.turns:
        if topic != last and topic in seen:
            return True
        seen.add(topic)
        last = topic
    return False


def choose_return_similarity(decider: LearnedDecider, dialogues: list[LabelledDialogue],
                             vectors: list[tuple[np.ndarray, np.ndarray]], embedder: Any) -> tuple[float | None, list[Any]]:
    """The ``RETURN_GRID`` value (or None) with the best mean of boundary F1 and return accuracy on
    the dialogues that have returns, and every value's scores."""
    from chunktree.track.decide import Thresholds
    from chunktree.track.evaluate import labelled_turns, run_forest, score_dialogue

    chosen = [(d, v) for d, v in zip(dialogues, vectors) if has_returns(d)]
    if not chosen:
        return None, []
    rows: list[dict[str, Any]] = []
    for value in (None, *RETURN_GRID):
        candidate = dataclasses.replace(decider, return_similarity=value)
        f1, acc = [], []
        for d, (u, nv) in chosen:
            turns = labelled_turns(d)
            trees, _ = run_forest(turns, u, nv, embedder, Thresholds(), decider=candidate)
            m = score_dialogue(turns, trees)
            f1.append(m["boundary_f1"])
            acc.append(m["return_accuracy"])
        rows.append({"return_similarity": value, "boundary_f1": float(np.mean(f1)),
                     "return_accuracy": float(np.nanmean(acc))})
    best = max(rows, key=lambda r: float(r["boundary_f1"]) + float(r["return_accuracy"]))
    return best["return_similarity"], rows


def fit(dialogues: list[LabelledDialogue], embedder: Any, cache: Any = None, *, hidden: int = DEFAULT_HIDDEN,
        l2: float = DEFAULT_L2, threshold: float = DEFAULT_THRESHOLD, info: dict[str, Any] | None = None,
        progress: bool = False) -> LearnedDecider:
    """Fit a decider on ``dialogues``: the weights (``hidden`` tanh units; a logistic regression
    with ``hidden=0`` or on fewer than ``MIN_NETWORK_PAIRS`` turn-tree pairs), then
    ``return_similarity`` on those with returns. ``info["hidden"]`` says which was made."""
    number(threshold, "threshold", 0.0, 1.0, low_open=True)
    integer(hidden, "hidden", 0)
    number(l2, "l2", 0.0)
    if not dialogues:
        raise InvalidValueError("fit needs at least one dialogue")
    t0 = time.perf_counter()
    vectors = embed_dialogues(dialogues, embedder, cache, progress)
    pairs = [teacher_forced(d, u, v, embedder) for d, (u, v) in zip(dialogues, vectors)]
    x = np.concatenate([p[0] for p in pairs])
    y = np.concatenate([p[1] for p in pairs])
    if y.size == 0 or y.min() == y.max():
        raise InvalidValueError("the dialogues hold no topic change (or nothing but changes): nothing to learn")
    sources = np.concatenate([np.full(len(p[1]), d.source, dtype=object) for d, p in zip(dialogues, pairs)])
    counts = {s: int((sources == s).sum()) for s in set(sources.tolist())}
    row_weights = np.array([1.0 / counts[s] for s in sources])
    if y.size < MIN_NETWORK_PAIRS:
        hidden = 0
    if hidden:
        w, mean, scale, w1, b1 = fit_network(x, y, hidden, l2, row_weights)
        decider = LearnedDecider(w, mean, scale, threshold, hidden_weights=w1, hidden_bias=b1)
    else:
        w, mean, scale = fit_weights(x, y, l2, row_weights)
        decider = LearnedDecider(w, mean, scale, threshold)
    back, grid = choose_return_similarity(decider, dialogues, vectors, embedder)
    made = {"pairs": len(y), "positives": int(y.sum()), "dialogues": len(dialogues), "pairs_by_source": counts,
            "hidden": hidden, "l2": l2, "threshold": threshold, "return_similarity": back, "return_grid": grid,
            "model": embedder.model_id, "fit_seconds": round(time.perf_counter() - t0, 1)}
    return dataclasses.replace(decider, return_similarity=back, info={**made, **(info or {})})


def load_labelled(path: str | Path, *, stitched: int = 60, length: int = 40,
                  seed: int = 0) -> list[LabelledDialogue]:
    """Dialogues with a topic per turn, from any of:

    - a segmentation file (``segmentation.load_segmentation``): each segment its own topic;
    - a CoQA or SQuAD JSON file: ``stitched`` dialogues of ``length`` turns stitched from the
      first half of its stories, with returns (``evaluate.stitch``; the evaluation uses the second);
    - a JSONL file: one turn a line, ``user``, ``topic`` (any string or number: turns with equal
      topics are of one topic), optional ``assistant`` and ``conversation``.
    """
    from chunktree.track.evaluate import load_stories, stitch
    from chunktree.track.segmentation import is_segmentation_file, load_segmentation

    path = Path(path)
    if path.suffix == ".jsonl":
        return _load_jsonl(path)
    try:
        data = json_loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidValueError(f"{path}: not a JSON file ({type(exc).__name__}: {exc})") from None
    if is_segmentation_file(data):
        return [LabelledDialogue(d.id, [(u, None, f"segment {j}") for u, j in
                                        zip(d.utterances, np.repeat(np.arange(len(d.segments)), d.segments))], path.name)
                for d in load_segmentation(path)]
    if isinstance(data, dict) and "data" in data:
        stories = load_stories(path)
        half = stories[:len(stories) // 2]
        return [LabelledDialogue(f"{path.stem} {i}", [(t.user, t.assistant, f"story {t.story}")
                                                      for t in stitch(half, length, seed * 1000 + i)], path.name)
                for i in range(stitched)]
    raise InvalidValueError(f"{path}: not a segmentation file, a CoQA or SQuAD file or a JSONL file of turns with "
                            f"topics")


def _load_jsonl(path: Path) -> list[LabelledDialogue]:
    from chunktree.track.forest import read_dialogue

    return [LabelledDialogue(name, [(user, assistant, str(topic)) for user, assistant, topic in turns], path.name)
            for name, turns in read_dialogue(path, topics=True).items()]
