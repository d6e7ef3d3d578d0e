"""Dialogue topic segmentation benchmarks (DialSeg711, TIAGE, SuperDialseg): the data format, the
metrics under the SuperDialseg protocol, and the topic forest scored on them.

A file is a JSON list of dialogues ``{"dial_id", "utterances": [str, ...], "segments": [lengths]}``
(``segments`` sum to the number of utterances). Each utterance is one turn of the forest (a
``user`` line, as ``chunktree track`` reads it); a hypothesis boundary follows utterance ``i``
when utterance ``i + 1`` is placed in another tree.

The protocol (SuperDialseg, Jiang et al. EMNLP 2023): labels per utterance, 1 where a segment ends
(the last utterance excluded); Pk and WindowDiff over windows of ``k = max(2, round(n / segments /
2))`` labels, per dialogue, as NLTK computes them (``n - k + 1`` windows); boundary precision,
recall and F1 on exact positions. Each is averaged over dialogues, with a 95% bootstrap interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, json_loads


@dataclass(frozen=True)
class SegmentedDialogue:
    """One dialogue of a segmentation file: its id, utterances and gold segment lengths."""

    id: str
    utterances: list[str]
    segments: list[int]

    @property
    def labels(self) -> np.ndarray:
        """1 where a gold segment ends, the last utterance excluded (int8, one per utterance)."""
        return labels_from_segments(self.segments)


def labels_from_segments(segments: list[int]) -> np.ndarray:
    y = np.zeros(sum(segments), np.int8)
    y[np.cumsum(segments)[:-1] - 1] = 1
    return y


def labels_from_topics(topics: list[int] | np.ndarray) -> np.ndarray:
    """The labels of a sequence of topic ids: 1 where the next utterance has another topic."""
    t = np.asarray(topics)
    y = np.zeros(t.size, np.int8)
    y[:-1] = t[1:] != t[:-1]
    return y


def is_segmentation_file(data: Any) -> bool:
    """Whether parsed JSON looks like a segmentation file (a list of dialogues with segments)."""
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "segments" in data[0]


def sniff(path: str | Path) -> str:
    """``"segmentation"`` when the file at ``path`` is a segmentation file, else ``"other"``."""
    try:
        return "segmentation" if is_segmentation_file(json_loads(Path(path).read_text(encoding="utf-8"))) else "other"
    except (OSError, ValueError):
        return "other"


def load_segmentation(path: str | Path) -> list[SegmentedDialogue]:
    """The dialogues of a segmentation file; a malformed one is an error naming its index."""
    path = Path(path)
    try:
        data = json_loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidValueError(f"{path}: not a JSON file ({type(exc).__name__}: {exc})") from None
    if not is_segmentation_file(data):
        raise InvalidValueError(f"{path}: not a segmentation file (a JSON list of dialogues with 'utterances' "
                                "and 'segments')")
    out = []
    for i, d in enumerate(data):
        utterances = d.get("utterances") if isinstance(d, dict) else None
        segments = d.get("segments") if isinstance(d, dict) else None
        if not isinstance(utterances, list) or not all(isinstance(u, str) and u.strip() for u in utterances):
            raise InvalidValueError(f"{path}: dialogue {i}: 'utterances' must be a list of non-empty strings")
        if (not isinstance(segments, list) or not segments or not all(isinstance(s, int) and s >= 1 for s in segments)
                or sum(segments) != len(utterances)):
            raise InvalidValueError(f"{path}: dialogue {i}: 'segments' must be lengths >= 1 that sum to the "
                                    f"{len(utterances)} utterances; got {segments!r}")
        out.append(SegmentedDialogue(str(d.get("dial_id", i)), utterances, segments))
    return out


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


def forest_labels(utterances: list[str], vectors: np.ndarray, embedder: Any, decider: Any) -> tuple[np.ndarray, float]:
    """The forest's labels of one dialogue (each utterance a user turn, its vector given) and
    the seconds its decisions took, embedding excluded."""
    import time

    from chunktree.track.forest import Forest

    forest = Forest(embedder, decider=decider)
    topics = []
    t0 = time.perf_counter()
    for u, v in zip(utterances, vectors):
        topics.append(forest._place(u, None, v, v).tree)
    return labels_from_topics(topics), time.perf_counter() - t0


def evaluate_segmentation(dialogues: list[SegmentedDialogue], embedder: Any, cache: Any = None, *,
                          decider: Any = None, seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """Pk, WindowDiff and boundary scores of the forest (``decider``: as ``Forest`` takes it) and of
    the threshold rule, random and even baselines, averaged over dialogues with 95% bootstrap
    intervals; and the forest's milliseconds per decision."""
    from chunktree.engine.embedding import embed_texts
    from chunktree.engine.evaluate.stats import bootstrap
    from chunktree.progress import tracked

    if not dialogues:
        raise InvalidValueError("no dialogues to evaluate")
    vectors, _ = embed_texts([u for d in dialogues for u in d.utterances], embedder, cache, progress=progress)
    gold = [d.labels for d in dialogues]
    rate = float(sum(g.sum() for g in gold) / sum(g.size - 1 for g in gold if g.size > 1))
    rng = np.random.default_rng(seed)
    rows: dict[str, list[dict[str, float]]] = {"forest": [], "thresholds": [], "random": [], "even": []}
    seconds, decisions, start = 0.0, 0, 0
    for d, g in tracked(list(zip(dialogues, gold)), len(dialogues), "eval-track", "dialogue", enabled=progress):
        v = vectors[start:start + len(d.utterances)]
        start += len(d.utterances)
        hyp, s = forest_labels(d.utterances, v, embedder, decider)
        seconds, decisions = seconds + s, decisions + len(d.utterances)
        rows["forest"].append(score(g, hyp))
        rows["thresholds"].append(score(g, forest_labels(d.utterances, v, embedder, "thresholds")[0]))
        rows["random"].append(score(g, baseline_random(g, rate, rng)))
        rows["even"].append(score(g, baseline_even(g)))
    methods = {name: {key: bootstrap([r[key] for r in values], seed=seed) for key in values[0]}
               for name, values in rows.items()}
    return {"dialogues": len(dialogues), "utterances": int(sum(g.size for g in gold)),
            "mean_segment": float(sum(g.size for g in gold) / sum(g.sum() + 1 for g in gold)),
            "methods": methods, "ms_per_decision": 1000 * seconds / max(1, decisions)}


def format_segmentation(report: dict[str, Any]) -> str:
    """The report as a Markdown table: one row per method."""
    keys = ("pk", "windowdiff", "boundary_f1", "boundary_precision", "boundary_recall")
    lines = [f"{report['dialogues']} dialogues, {report['utterances']} utterances, mean segment "
             f"{report['mean_segment']:.1f}; the forest decides in {report['ms_per_decision']:.3f} ms per utterance",
             f"| method | {' | '.join(keys)} |", "|---|" + "---|" * len(keys)]
    for name, m in report["methods"].items():
        lines.append(f"| {name} | " + " | ".join(f"{m[k]['mean']:.3f} [{m[k]['lo']:.3f}, {m[k]['hi']:.3f}]" for k in keys)
                     + " |")
    return "\n".join(lines)
