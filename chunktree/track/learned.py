"""The learned topic decider: the probability that a new turn belongs to each tree of the forest.

For every tree, features of the new turn's vector ``v`` against it: the similarity to the tree's
anchor (the current node for the current tree, else where it was left), the highest similarity
to the recent path ending there, to any node and to the tree's mean; the tree's size, how many
turns ago it was last visited, the turn's content words and the share of them the tree already
holds, whether the turn opens with a connective ("and", "what about") or refers back with a
pronoun; each of these again times "this is the current tree"; and ``v`` times the tree's mean
and times its anchor, element by element (a similarity whose dimensions the model weighs). A
small neural network (one hidden layer of tanh units) or a logistic regression maps them to the
probability that the turn is of that tree's topic. The forest then takes the most probable tree,
or a new topic when no tree reaches ``threshold`` (``Forest``, ``decide.decide_learned``).

``train.fit`` learns the weights from dialogues with a topic per turn (``chunktree
train-track``); this module only reads and applies them, so placing turns never imports the
fitting or the evaluation. The package ships a decider fitted on public data
(``default_decider``); its ``info`` holds the data, settings and validation figures that made it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import ChunktreeError, InvalidValueError
from chunktree.files import replacing

log = logging.getLogger(__name__)

FEATURES_VERSION = 2
BASE_FEATURES = ("anchor_similarity", "recent_similarity", "best_similarity", "mean_similarity", "log_tree_size",
                 "log_turns_since", "log_content_words", "word_overlap", "opens_with_connective", "refers_back")
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
        with replacing(path, "wb") as f:
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


def load_decider(decider: Any) -> LearnedDecider | None:
    """``Forest``'s ``decider`` argument as a ``LearnedDecider``, or None for the threshold rule."""
    if decider is None:
        return default_decider()
    if isinstance(decider, LearnedDecider):
        return decider
    if decider == "thresholds":
        return None
    if isinstance(decider, (str, os.PathLike)):
        return LearnedDecider.load(decider)
    raise InvalidValueError(f"decider must be None (the shipped one), 'thresholds', a LearnedDecider or the path of a "
                            f"decider file; got {decider!r}")


def decider_for(decider: Any, embedder: Any) -> LearnedDecider | None:
    """``decider`` (as ``load_decider`` takes it) for ``embedder``'s vectors. The shipped decider
    was fitted on the default model's vectors, so for another model (``decider=None``) the
    threshold rule places turns, with a warning; a decider the user names must fit the vectors'
    dimension."""
    learned = load_decider(decider)
    if learned is not None and decider is None and learned.info.get("model") != embedder.model_id:
        _warn_thresholds(embedder.name)
        return None
    if learned is not None:
        learned.check(embedder.dim)
    return learned


@functools.cache
def _warn_thresholds(model: str) -> None:
    log.warning("the shipped topic decider was fitted on %s's vectors; with %s the threshold rule places turns "
                "(fit one for this model with 'chunktree train-track' and its --model)",
                default_decider().info.get("model", "the default model").split("@")[0], model)
