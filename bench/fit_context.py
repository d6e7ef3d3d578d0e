"""Fit the weights of the context's relevance model (``chunktree/track/context.py``).

    python bench/fit_context.py   # needs ../shared/data (CoQA, SQuAD-Shifts)

On 30 dialogues each of 40 and 80 turns stitched from the first half of the CoQA stories and of
the SQuAD-Shifts articles (the half ``chunktree eval-track`` does not use), placed turn by turn by
the shipped decider: for every turn and every earlier turn, the ``RELEVANCE_FEATURES`` and whether
the two are of one story. A logistic regression (``train.fit_weights``, L2 1, each source weighing
the same) gives the weights on the features' own scale; paste them into ``RELEVANCE_WEIGHTS`` and
``RELEVANCE_BIAS``. Segmentation benchmarks (DialSeg711, TIAGE) are left out: their topics never
come back, so a fit on them learns that only the current stretch matters. Also prints, on the
same pairs, how well the shipped weights and the fitted ones rank them (the mean log loss).

Writes ``bench/results/fit_context.json``.
"""

import sys
from pathlib import Path

import numpy as np
from record import title, write

from chunktree import Embedder
from chunktree.engine.cache import EmbeddingCache
from chunktree.track.context import RELEVANCE_FEATURES, relevance, relevance_features
from chunktree.track.data import Turn, load_stories, stitch
from chunktree.track.decide import Thresholds
from chunktree.track.evaluate import embed_turns
from chunktree.track.forest import Forest
from chunktree.track.train import fit_weights

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = {"coqa": DATA / "coqa_test.json", "squad": DATA / "squad_shifts_new_wiki_v1.0.json"}
LENGTHS, DIALOGUES, L2 = (40, 80), 30, 1.0


def dialogues(path: Path) -> list[list[Turn]]:
    """The dialogues stitched from the first half of a CoQA or SQuAD file."""
    stories = load_stories(path)
    half = stories[:len(stories) // 2]
    return [stitch(half, length, i) for length in LENGTHS for i in range(DIALOGUES)]


def pairs(path: Path, embedder: Embedder, cache: EmbeddingCache) -> tuple[np.ndarray, np.ndarray]:
    """Every (earlier turn, turn) pair's features and label."""
    xs, ys = [], []
    made = dialogues(path)
    for turns, (u, v, _) in zip(made, embed_turns(made, embedder, cache, False)):
        forest = Forest(embedder)
        story = np.array([t.story for t in turns])
        for i, turn in enumerate(turns):
            forest._place(turn.user, turn.assistant, u[i], v[i])
            if i:
                xs.append(relevance_features(forest._vectors[:i + 1], forest._tree_of[:i + 1], i)[:i])
                ys.append(story[:i] == story[i])
    return np.concatenate(xs), np.concatenate(ys).astype(np.float32)


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-9, 1 - 1e-9)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def main() -> int:
    for path in SETS.values():
        if not path.is_file():
            print(f"{path} not found", file=sys.stderr)
            return 1
    embedder, cache = Embedder(), EmbeddingCache()
    data = {name: pairs(path, embedder, cache) for name, path in SETS.items()}
    x = np.concatenate([d[0] for d in data.values()])
    y = np.concatenate([d[1] for d in data.values()])
    weights = np.concatenate([np.full(len(d[1]), 1.0 / len(d[1])) for d in data.values()])
    w, mean, scale = fit_weights(np.c_[np.ones(len(y)), x], y, L2, weights)
    raw = w[1:] / scale[1:]
    bias = float(w[0] - np.sum(w[1:] * mean[1:] / scale[1:]))
    fitted = 1.0 / (1.0 + np.exp(-(x @ raw + bias)))
    losses = {name: {"shipped": log_loss(relevance(d[0]), d[1]),
                     "fitted": log_loss(1.0 / (1.0 + np.exp(-(d[0] @ raw + bias))), d[1])} for name, d in data.items()}
    lines = [f"{len(y):,} pairs ({int(y.sum()):,} of one story) from {DIALOGUES} dialogues each of {LENGTHS} turns, "
             f"first half of {', '.join(p.name for p in SETS.values())}",
             "RELEVANCE_WEIGHTS = np.array([" + ", ".join(f"{v:.2f}" for v in raw) + "])  # " + ", ".join(RELEVANCE_FEATURES),
             f"RELEVANCE_BIAS = {bias:.2f}",
             *(f"{name}: mean log loss, shipped weights {m['shipped']:.4f}, fitted {m['fitted']:.4f}"
               for name, m in losses.items()),
             f"all: fitted {log_loss(fitted, y):.4f}"]
    print("\n".join(lines))
    write("fit_context", title(__doc__, "fit_context"), "python bench/fit_context.py", lines,
          {"features": list(RELEVANCE_FEATURES), "weights": raw.tolist(), "bias": bias, "l2": L2, "pairs": len(y),
           "log_loss": losses, "decider": "shipped", "thresholds": Thresholds().__dict__})
    return 0


if __name__ == "__main__":
    sys.exit(main())
