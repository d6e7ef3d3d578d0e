"""Dialogue topic segmentation benchmarks (DialSeg711, TIAGE, SuperDialseg): the metrics under the
SuperDialseg protocol, and the topic forest scored on them.

A file (``data.load_segmentation``) is a JSON list of dialogues ``{"dial_id", "utterances": [str, ...], "segments": [lengths]}``
(``segments`` sum to the number of utterances). Each utterance is one turn of the forest (a
``user`` line, as ``chunktree track`` reads it); a hypothesis boundary follows utterance ``i``
when utterance ``i + 1`` is placed in another tree.

The protocol (SuperDialseg, Jiang et al. EMNLP 2023): labels per utterance, 1 where a segment ends
(the last utterance excluded); Pk and WindowDiff over windows of ``k = max(2, round(n / segments /
2))`` labels, per dialogue, as NLTK computes them (``n - k + 1`` windows); boundary precision,
recall and F1 on exact positions. Each is averaged over dialogues, with a 95% bootstrap interval.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.progress import Progress, tracked
from chunktree.track.data import SegmentedDialogue, Turn
from chunktree.track.decide import Thresholds
from chunktree.track.evaluate import (
    cell,
    context_budgets,
    format_frontier,
    interval_note,
    run_forest,
    score_context,
    summarise,
)


def labels_from_topics(topics: list[int] | np.ndarray) -> np.ndarray:
    """The labels of a sequence of topic ids: 1 where the next utterance has another topic."""
    t = np.asarray(topics)
    y = np.zeros(t.size, np.int8)
    y[:-1] = t[1:] != t[:-1]
    return y


def window(labels: np.ndarray) -> int:
    """The protocol's k: half the mean gold segment length, at least 2."""
    return max(2, round(labels.size / (int(labels.sum()) + 1) / 2))


def pk(ref: np.ndarray, hyp: np.ndarray, k: int) -> float:
    """Beeferman's Pk as NLTK computes it: the share of the ``n - k + 1`` windows of ``k`` labels
    where one segmentation has a boundary and the other has none."""
    r, h = _window_counts(ref, k), _window_counts(hyp, k)
    return float(np.mean((r > 0) != (h > 0)))


def windowdiff(ref: np.ndarray, hyp: np.ndarray, k: int) -> float:
    """Pevzner and Hearst's WindowDiff as NLTK computes it: the share of windows whose boundary
    counts differ."""
    return float(np.mean(_window_counts(ref, k) != _window_counts(hyp, k)))


def _window_counts(labels: np.ndarray, k: int) -> np.ndarray:
    c = np.r_[0, np.cumsum(labels)]
    if labels.size < k:
        return c[-1:] - c[:1]
    return c[k:] - c[:-k]


def boundary_scores(ref: np.ndarray, hyp: np.ndarray) -> dict[str, float]:
    """Precision, recall and F1 of boundaries at exact positions (1.0 where there is nothing to find)."""
    tp = int((ref.astype(bool) & hyp.astype(bool)).sum())
    p = tp / hyp.sum() if hyp.sum() else 1.0
    r = tp / ref.sum() if ref.sum() else 1.0
    return {"boundary_precision": float(p), "boundary_recall": float(r),
            "boundary_f1": float(2 * p * r / (p + r)) if p + r else 0.0}


def score(ref: np.ndarray, hyp: np.ndarray) -> dict[str, float]:
    """Every metric of one dialogue."""
    k = window(ref)
    return {"pk": pk(ref, hyp, k), "windowdiff": windowdiff(ref, hyp, k), **boundary_scores(ref, hyp)}


def baseline_random(labels: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Boundaries drawn independently with probability ``rate`` (the gold rate of the data)."""
    y = (rng.random(labels.size) < rate).astype(np.int8)
    y[-1] = 0
    return y


def baseline_even(labels: np.ndarray) -> np.ndarray:
    """The dialogue cut into as many equal stretches as it has gold segments (told the number)."""
    n, segments = labels.size, int(labels.sum()) + 1
    y = np.zeros(n, np.int8)
    for j in range(1, segments):
        y[max(0, round(n * j / segments) - 1)] = 1
    return y


def evaluate_segmentation(dialogues: list[SegmentedDialogue], embedder: Any, cache: EmbeddingCache | None = None, *,
                          decider: Any = None, seed: int = 0, progress: Progress = False) -> dict[str, Any]:
    """Pk, WindowDiff and boundary scores of the forest (``decider``: as ``Forest`` takes it) and of
    the threshold rule, random and even baselines, averaged over dialogues with 95% bootstrap
    intervals; the forest's context frontier (``evaluate.score_context``, each segment a topic);
    and the forest's milliseconds per decision."""
    if not dialogues:
        raise InvalidValueError("no dialogues to evaluate")
    utterances = [u for d in dialogues for u in d.utterances]
    vectors, _ = embed_texts(utterances, embedder, cache, progress=progress, prompt="query")
    tokens = embedder.count_tokens(utterances)
    gold = [d.labels for d in dialogues]
    rate = float(sum(g.sum() for g in gold) / sum(g.size - 1 for g in gold if g.size > 1))
    rng = np.random.default_rng(seed)
    rows: dict[str, list[dict[str, float]]] = {"forest": [], "thresholds": [], "random": [], "even": []}
    frontier = []
    seconds, decisions, start = 0.0, 0, 0
    for d, g in tracked(list(zip(dialogues, gold)), len(dialogues), "eval-track", "dialogue", enabled=progress):
        n = len(d.utterances)
        v, c = vectors[start:start + n], tokens[start:start + n]
        start += n
        turns = [Turn(u, "", int(s)) for u, s in zip(d.utterances, np.repeat(np.arange(len(d.segments)), d.segments))]
        t0 = time.perf_counter()  # the decisions timed alone; the contexts come from a second run, the same decisions
        trees, _ = run_forest(turns, v, v, embedder, Thresholds(), decider)
        seconds, decisions = seconds + time.perf_counter() - t0, decisions + n
        _, contexts = run_forest(turns, v, v, embedder, Thresholds(), decider, context_budgets(c))
        frontier.append(score_context(turns, contexts, v, c))
        rows["forest"].append(score(g, labels_from_topics(trees)))
        rows["thresholds"].append(score(g, labels_from_topics(run_forest(turns, v, v, embedder, Thresholds(),
                                                                         "thresholds")[0])))
        rows["random"].append(score(g, baseline_random(g, rate, rng)))
        rows["even"].append(score(g, baseline_even(g)))
    scored = [f for f in frontier if f]
    return {"dialogues": len(dialogues), "utterances": int(sum(g.size for g in gold)),
            "mean_segment": float(sum(g.size for g in gold) / sum(g.sum() + 1 for g in gold)),
            "methods": {name: summarise(values, seed) for name, values in rows.items()},
            "context": summarise(scored, seed) if scored else {},
            "ms_per_decision": 1000 * seconds / max(1, decisions)}


def format_segmentation(report: dict[str, Any]) -> str:
    """The report as Markdown tables: one row per method, then the forest's context frontier."""
    keys = ("pk", "windowdiff", "boundary_f1", "boundary_precision", "boundary_recall")
    lines = [f"{report['dialogues']} dialogues, {report['utterances']} utterances, mean segment "
             f"{report['mean_segment']:.1f}; the forest decides in {report['ms_per_decision']:.3f} ms per utterance",
             *interval_note(report["dialogues"], "dialogues"),
             f"| method | {' | '.join(keys)} |", "|---|" + "---|" * len(keys)]
    for name, m in report["methods"].items():
        lines.append(f"| {name} | " + " | ".join(cell(m[k]) for k in keys) + " |")
    return "\n".join([*lines, *format_frontier(report["context"])])
