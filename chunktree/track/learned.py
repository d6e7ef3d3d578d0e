"""The learned topic decider: the probability that a new turn belongs to each tree of the forest.

For every tree, features of the new turn's vector ``v`` against it: the similarity to the tree's
anchor (the current node for the current tree, else where it was left), the highest similarity
to the recent path ending there, to any node and to the tree's mean; the tree's size, how many
turns ago it was last visited, the turn's content words and the share of them the tree already
holds, whether the turn opens with a connective ("and", "what about") or refers back with a
pronoun; each of these again times "this is the current tree"; and ``v`` times the tree's mean
and times its anchor, element by element (a similarity whose dimensions the model weighs). A
logistic regression maps them to the probability that the turn is of that tree's topic. The
forest then takes the most probable tree, or a new topic when no tree reaches ``threshold``
(``Forest``, ``decide.decide_learned``).

``fit`` learns the weights from dialogues with a topic per turn, by placing every turn where its
gold topic says (teacher forcing) and recording each tree's features and whether it was the right
one. The package ships a decider fitted on public data (``default_decider``); its ``info`` holds
the data, settings and validation figures that made it.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import ChunktreeError, InvalidValueError, json_loads, number

FEATURES_VERSION = 2
BASE_FEATURES = ("anchor_similarity", "recent_similarity", "best_similarity", "mean_similarity", "log_tree_size",
                 "log_turns_since", "log_content_words", "word_overlap", "opens_with_connective", "refers_back")
DEFAULT_L2 = 30.0
DEFAULT_THRESHOLD = 0.5


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
    """Logistic-regression weights over standardised ``tree_features``.

    Attributes
    ----------
    weights, mean, scale
        ``p = sigmoid(((features - mean) / scale) @ weights)``.
    threshold
        the least probability that keeps a turn in an existing tree; below it, a new topic.
    return_similarity
        below ``threshold``, a turn still returns to another tree whose similarity (``fit``)
        reaches this (None: never). Public segmentation data holds no returns, so the model alone
        rarely returns; ``fit`` chooses this on its dialogues that have returns.
    info
        how it was made: data, settings, validation figures.
    """

    weights: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    threshold: float = DEFAULT_THRESHOLD
    return_similarity: float | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """The probability of each row of ``features`` (one row per tree)."""
        z = ((features - self.mean) / self.scale) @ self.weights
        return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the decider to ``path`` (an ``.npz`` file, whatever its name)."""
        with open(path, "wb") as f:
            np.savez(f, weights=self.weights, mean=self.mean, scale=self.scale, threshold=self.threshold,
                     return_similarity=np.nan if self.return_similarity is None else self.return_similarity,
                     features_version=FEATURES_VERSION, info=json.dumps(self.info))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LearnedDecider:
        """Read a decider written by ``save`` (``chunktree train-track``)."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as f:
                arrays = {k: f[k] for k in ("weights", "mean", "scale", "threshold", "return_similarity",
                                            "features_version", "info")}
        except (OSError, ValueError, KeyError) as exc:
            raise DeciderFileError(f"{path}: not a decider file written by 'chunktree train-track' ({exc})") from None
        if int(arrays["features_version"]) != FEATURES_VERSION:
            raise DeciderFileError(f"{path}: features version {int(arrays['features_version'])}; this chunktree "
                                   f"computes version {FEATURES_VERSION}: fit it again with 'chunktree train-track'")
        w, m, s = (np.asarray(arrays[k], np.float64) for k in ("weights", "mean", "scale"))
        if not (w.ndim == m.ndim == s.ndim == 1 and w.shape == m.shape == s.shape) or not np.isfinite(w).all() \
                or not (s > 0).all():
            raise DeciderFileError(f"{path}: damaged weights (shapes {w.shape}, {m.shape}, {s.shape})")
        back = float(arrays["return_similarity"])
        return cls(w, m, s, float(arrays["threshold"]), None if np.isnan(back) else back, json.loads(str(arrays["info"])))

    def check(self, dim: int) -> None:
        """Refuse a decider fitted on vectors of another dimension."""
        if self.weights.shape[0] != n_features(dim):
            raise InvalidValueError(f"the decider expects {(self.weights.shape[0] - n_features(0)) // 2}-dimensional "
                                    f"vectors; the embedder makes {dim}")


@functools.lru_cache(maxsize=1)
def default_decider() -> LearnedDecider:
    """The decider shipped with chunktree (``chunktree/data/track_decider.npz``)."""
    return LearnedDecider.load(Path(str(resources.files("chunktree") / "data" / "track_decider.npz")))


def fit_weights(x: np.ndarray, y: np.ndarray, l2: float = DEFAULT_L2,
                weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """L2-regularised logistic regression on standardised features (L-BFGS), each row weighted by
    ``weights`` (default 1; they are scaled to a mean of 1); the constant column (the first) is
    left unscaled and unpenalised."""
    from scipy.optimize import minimize

    number(l2, "l2", 0.0)
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
    mean[0], scale[0] = 0.0, 1.0
    z = ((x - mean) / scale).astype(np.float64)
    yy = y.astype(np.float64)
    r = np.ones(len(yy)) if weights is None else np.asarray(weights, np.float64) / np.mean(weights)
    penalty = np.ones(z.shape[1])
    penalty[0] = 0.0

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        s = z @ w
        p = 1.0 / (1.0 + np.exp(-np.clip(s, -60, 60)))
        value = float(np.mean(r * (np.logaddexp(0.0, s) - yy * s)) + 0.5 * l2 * np.sum(penalty * w * w) / len(yy))
        return value, z.T @ (r * (p - yy)) / len(yy) + l2 * penalty * w / len(yy)

    w = minimize(loss, np.zeros(z.shape[1]), jac=True, method="L-BFGS-B", options={"maxiter": 1000}).x
    return w, mean, scale


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
            ids, x = forest.features(user_vectors[i], user)
            rows.append(x)
            labels.append(np.array([tree == gold for tree in ids], np.float32))
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
    import dataclasses

    from chunktree.track.decide import Thresholds
    from chunktree.track.evaluate import Turn, run_forest, score_dialogue

    chosen = [(d, v) for d, v in zip(dialogues, vectors) if has_returns(d)]
    if not chosen:
        return None, []
    rows: list[dict[str, Any]] = []
    for value in (None, *RETURN_GRID):
        candidate = dataclasses.replace(decider, return_similarity=value)
        f1, acc = [], []
        for d, (u, nv) in chosen:
            ids = {topic: i for i, topic in enumerate(dict.fromkeys(t[2] for t in d.turns))}
            turns = [Turn(user, assistant or "", ids[topic]) for user, assistant, topic in d.turns]
            trees, _ = run_forest(turns, u, nv, embedder, Thresholds(), decider=candidate)
            m = score_dialogue(turns, trees)
            f1.append(m["boundary_f1"])
            acc.append(m["return_accuracy"])
        rows.append({"return_similarity": value, "boundary_f1": float(np.mean(f1)),
                     "return_accuracy": float(np.nanmean(acc))})
    best = max(rows, key=lambda r: float(r["boundary_f1"]) + float(r["return_accuracy"]))
    return best["return_similarity"], rows


def fit(dialogues: list[LabelledDialogue], embedder: Any, cache: Any = None, *, l2: float = DEFAULT_L2,
        threshold: float = DEFAULT_THRESHOLD, info: dict[str, Any] | None = None,
        progress: bool = False) -> LearnedDecider:
    """Fit a decider on ``dialogues``: the weights, then ``return_similarity`` on those with returns."""
    number(threshold, "threshold", 0.0, 1.0, low_open=True)
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
    w, mean, scale = fit_weights(x, y, l2, np.array([1.0 / counts[s] for s in sources]))
    decider = LearnedDecider(w, mean, scale, threshold)
    back, grid = choose_return_similarity(decider, dialogues, vectors, embedder)
    made = {"pairs": len(y), "positives": int(y.sum()), "dialogues": len(dialogues), "pairs_by_source": counts, "l2": l2,
            "threshold": threshold, "return_similarity": back, "return_grid": grid, "model": embedder.model_id,
            "fit_seconds": round(time.perf_counter() - t0, 1)}
    return LearnedDecider(w, mean, scale, threshold, back, {**made, **(info or {})})


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
