"""Long real conversations with questions about them: the LoCoMo format (Maharana et al., ACL 2024)
and how much of each question's evidence a context holds.

A LoCoMo file is a JSON list of conversations between two people over many sittings: the
utterances of sitting N under ``session_N`` (``speaker``, ``dia_id`` such as ``"D3:5"``, ``text``,
optional ``blip_caption`` of a shared photo), either at the top level of each conversation or in
its ``conversation`` object (as in the public release), and ``qa``: questions with ``evidence``,
the ``dia_id``s of the utterances that hold the answer, and a ``category`` (1 multi-hop, 2
temporal, 3 open-domain, 4 single-hop, 5 adversarial, which has no answer and is left out).

``evaluate_locomo`` reads each utterance as one turn (``"Speaker: text"``, a shared photo as its
caption), places every turn in a forest, and for each question measures the share of its
evidence utterances that a context of each budget holds (evidence recall):

- ``forest``: the question added as the next turn of (a copy of) the forest, ``Forest.context(budget)``;
- ``forest_query``: ``Forest.context(budget, query=question)``, nothing added;
- the baselines, turns taken in their order while they fit: ``dense`` (cosine of the question
  with each turn, the same model), ``bm25`` (Okapi BM25 over the turns' words, ``lexical``),
  ``hybrid`` (the two fused by reciprocal rank, ``1/(60 + rank)`` summed) and ``last_n`` (the
  newest turns, as many as fit).

Means by question kind and over all questions, with 95% bootstrap intervals over conversations;
and the forest's shape: trees per conversation, and how often two evidence utterances of one
question from different sittings share a tree, against how often two turns drawn at random do.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, integer
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.engine.lexical import lexical_tokens
from chunktree.progress import Progress, tracked
from chunktree.track.data import SESSION, is_locomo, locomo_sittings, read_json
from chunktree.track.evaluate import _fill
from chunktree.track.forest import Forest

KINDS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ADVERSARIAL = 5  # questions with no answer in the conversation: left out
BUDGETS = (256, 512, 1024, 2048, 4096)
METHODS = ("forest", "forest_query", "dense", "bm25", "hybrid", "last_n")
RRF_K = 60  # reciprocal rank fusion: 1 / (RRF_K + rank), the usual constant


@dataclass(frozen=True)
class Question:
    text: str
    kind: str
    evidence: tuple[int, ...]  # the turn indices of its evidence utterances


@dataclass(frozen=True)
class LocomoConversation:
    """One conversation: its turns (``"Speaker: text"``) with their ``dia_id``s and sittings (1, 2,
    ...), its questions, and how many questions were left out because no evidence id names one of
    its utterances (``unresolved``)."""

    id: str
    turns: list[str]
    dia_ids: list[str]
    sittings: list[int]
    questions: list[Question]
    unresolved: int = 0


def load_locomo(path: str | Path) -> list[LocomoConversation]:
    """The conversations of a LoCoMo file; a malformed one is an error naming it and the field."""
    path = Path(path)
    data = read_json(path)
    if not is_locomo(data):
        raise InvalidValueError(f"{path}: not a LoCoMo file (a JSON list of conversations with 'session_N' "
                                "utterance lists and 'qa')")
    out = []
    for i, record in enumerate(data):
        where = f"{path}: conversation {i}"
        holder = locomo_sittings(record)
        if holder is None or not isinstance(record.get("qa"), list):
            raise InvalidValueError(f"{where}: no 'session_N' utterance lists or no 'qa' list")
        turns, dia_ids, sittings = [], [], []
        for key in sorted((k for k in holder if SESSION.fullmatch(k)), key=lambda k: int(k.split("_")[1])):
            utterances = holder[key]
            if not isinstance(utterances, list):
                raise InvalidValueError(f"{where}: {key} must be a list of utterances")
            for j, u in enumerate(utterances):
                if not isinstance(u, dict) or not all(isinstance(u.get(f), str) for f in ("speaker", "dia_id", "text")):
                    raise InvalidValueError(f"{where}: {key}[{j}] needs 'speaker', 'dia_id' and 'text' strings")
                turn = f"{u['speaker']}: {u['text']}"
                if isinstance(u.get("blip_caption"), str) and u["blip_caption"].strip():
                    turn += f" [shares a photo of {u['blip_caption'].strip()}]"
                turns.append(turn)
                dia_ids.append(u["dia_id"])
                sittings.append(int(key.split("_")[1]))
        index = {d: k for k, d in enumerate(dia_ids)}
        questions, unresolved = [], 0
        for j, qa in enumerate(record["qa"]):
            if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
                raise InvalidValueError(f"{where}: qa[{j}] needs a 'question' string")
            if qa.get("category") == ADVERSARIAL:
                continue  # no answer in the conversation
            kind = KINDS.get(qa.get("category"))  # type: ignore[arg-type]
            if kind is None:
                raise InvalidValueError(f"{where}: qa[{j}]: category {qa.get('category')!r:.40} is none of "
                                        f"{sorted(KINDS)} or {ADVERSARIAL} (adversarial)")
            ids = [part for e in qa.get("evidence") or [] if isinstance(e, str) for part in re.split(r"[;,\s]+", e)]
            evidence = tuple(sorted({index[d] for d in ids if d in index}))
            if evidence:
                questions.append(Question(qa["question"], kind, evidence))
            else:
                unresolved += 1
        out.append(LocomoConversation(str(record.get("conversation_id", record.get("sample_id", i))), turns,
                                      dia_ids, sittings, questions, unresolved))
    return out


def fused(*orders: np.ndarray) -> np.ndarray:
    """Reciprocal rank fusion of rankings of the same n items: the items by descending
    ``sum(1 / (RRF_K + rank))`` (rank from 1), ties to the earlier item."""
    score = np.zeros(len(orders[0]))
    for order in orders:
        score[order] += 1.0 / (RRF_K + np.arange(1, len(order) + 1))
    return np.argsort(-score, kind="stable")


def together(groups: np.ndarray, conversation: LocomoConversation) -> dict[str, float]:
    """How often two evidence utterances of one question from different sittings share a group
    (``groups``: one group id a turn, from 0), against two turns drawn at random."""
    sizes = np.bincount(groups).astype(np.float64)
    pairs = [(a, b) for q in conversation.questions for i, a in enumerate(q.evidence) for b in q.evidence[i + 1:]
             if conversation.sittings[a] != conversation.sittings[b]]
    return {"evidence_pairs": float(len(pairs)),
            "evidence_together": float(np.mean([groups[a] == groups[b] for a, b in pairs])) if pairs else float("nan"),
            "chance_together": float(((sizes / sizes.sum()) ** 2).sum())}


def _forest_shape(forest: Forest, conversation: LocomoConversation) -> dict[str, float]:
    """Trees, turns per tree, the largest tree's share, and the co-location of evidence from
    different sittings (``together``)."""
    trees = np.array([node.tree for node in forest.nodes])
    sizes = np.bincount(trees).astype(np.float64)
    return {"trees": float(len(sizes)), "turns_per_tree": float(sizes.mean()),
            "largest_tree_share": float(sizes.max() / sizes.sum()), **together(trees, conversation)}


def _copy(forest: Forest) -> Forest:
    """A copy of ``forest`` that shares its embedder, cache, decider and judge."""
    shared = {id(forest.embedder): forest.embedder, id(forest.cache): forest.cache,
              id(forest.decider): forest.decider, id(forest.judge): forest.judge}
    return copy.deepcopy(forest, shared)


def conversation_forest(conversation: LocomoConversation, vectors: np.ndarray, embedder: Any,
                        cache: EmbeddingCache | None = None, decider: Any = None) -> Forest:
    """The forest of a conversation's utterances, each placed as a turn from its vector (one row an
    utterance, in order)."""
    forest = Forest(embedder, cache=cache, decider=decider)
    for text, v in zip(conversation.turns, vectors):
        forest._place(text, None, v, v)
    return forest


def evaluate_conversation(conversation: LocomoConversation, embedder: Any, cache: EmbeddingCache | None,
                          budgets: tuple[int, ...] = BUDGETS, decider: Any = None) -> dict[str, Any]:
    """Evidence recall of every method at every budget for each question of one conversation
    (``recall[method][budget]``: one value a question, in order), and the forest's shape."""
    turns, questions = conversation.turns, conversation.questions
    vectors, _ = embed_texts(turns + [q.text for q in questions], embedder, cache, prompt="query")
    turn_vectors, question_vectors = vectors[:len(turns)], vectors[len(turns):]
    tokens = embedder.count_tokens(turns)
    forest = conversation_forest(conversation, turn_vectors, embedder, cache, decider)
    n = len(turns)
    recall: dict[str, dict[int, list[float]]] = {m: {b: [] for b in budgets} for m in METHODS}
    for q, v in zip(questions, question_vectors):
        evidence = set(q.evidence)
        dense = np.argsort(-(turn_vectors @ v), kind="stable")
        bm25 = np.argsort(-forest._lexical.scores(lexical_tokens(q.text)), kind="stable")  # BM25 over the turns
        orders = {"dense": dense, "bm25": bm25, "hybrid": fused(dense, bm25)}
        asked = _copy(forest)
        asked._place(q.text, None, v, v)
        for b in budgets:
            held = {"forest": set(asked.context(b).turns) - {n}, "forest_query": set(forest.context(b, query=q.text).turns),
                    "last_n": _fill(range(n - 1, -1, -1), tokens, b, contiguous=True),
                    **{name: _fill(order, tokens, b) for name, order in orders.items()}}
            for name, kept in held.items():
                recall[name][b].append(len(kept & evidence) / len(evidence))
    return {"id": conversation.id, "kinds": [q.kind for q in questions], "recall": recall,
            "shape": _forest_shape(forest, conversation)}


def clustered(groups: list[list[float]], seed: int = 0, resamples: int = 2000) -> dict[str, float]:
    """The mean over all values of ``groups`` and its 95% percentile-bootstrap interval, resampling
    whole groups (conversations), whose questions are not independent of each other."""
    sums = np.array([sum(g) for g in groups], np.float64)
    counts = np.array([len(g) for g in groups], np.float64)
    rng = np.random.default_rng([seed, len(groups)])
    draws = rng.integers(0, len(groups), (resamples, len(groups)))
    means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"mean": float(sums.sum() / counts.sum()), "lo": float(lo), "hi": float(hi)}


def evaluate_locomo(conversations: list[LocomoConversation], *, embedder: Any, cache: EmbeddingCache | None = None,
                    budgets: tuple[int, ...] = BUDGETS, decider: Any = None, seed: int = 0,
                    progress: Progress = False) -> dict[str, Any]:
    """``evaluate_conversation`` on each conversation, then each method's mean evidence recall at
    each budget, over all questions and by kind, with 95% bootstrap intervals that resample
    whole conversations (``clustered``), and the forest's
    shape per conversation."""
    if not conversations or not any(c.questions for c in conversations):
        raise InvalidValueError("no conversation with an answerable question to evaluate")
    for b in budgets:
        integer(b, "budget", 1)
    done = [evaluate_conversation(c, embedder, cache, budgets, decider)
            for c in tracked(conversations, len(conversations), "eval-track locomo", "conversation", enabled=progress)
            if c.questions]
    kinds = [k for k in KINDS.values() if any(k in d["kinds"] for d in done)]

    def summary(method: str, b: int, kind: str | None) -> dict[str, float]:
        groups = [[r for r, k in zip(d["recall"][method][b], d["kinds"]) if kind in (None, k)] for d in done]
        groups = [g for g in groups if g]
        return {**clustered(groups, seed), "conversations": len(groups), "questions": sum(map(len, groups))}

    return {"conversations": len(done), "questions": sum(len(d["kinds"]) for d in done),
            "unresolved": sum(c.unresolved for c in conversations), "budgets": list(budgets),
            "all": {m: {b: summary(m, b, None) for b in budgets} for m in METHODS},
            "by_kind": {k: {m: {b: summary(m, b, k) for b in budgets} for m in METHODS} for k in kinds},
            "shape": {d["id"]: d["shape"] for d in done}}


MIN_INTERVAL = 5  # fewer conversations than this get means without intervals
NAMES = {"forest": "forest (question as a turn)", "forest_query": "forest (context(query=))", "dense": "dense top-k",
         "bm25": "BM25", "hybrid": "dense + BM25 (RRF)", "last_n": "last-N"}


def _cell(m: dict[str, float], intervals: bool) -> str:
    return f"{m['mean']:.3f} [{m['lo']:.3f}, {m['hi']:.3f}]" if intervals else f"{m['mean']:.3f}"


def format_locomo(report: dict[str, Any], kind_budget: int = 1024) -> str:
    """The evaluation as Markdown: evidence recall by budget and method, by question kind at
    ``kind_budget`` tokens, and the forest's shape per conversation."""
    intervals = report["conversations"] >= MIN_INTERVAL
    budgets = report["budgets"]
    lines = [f"{report['conversations']} conversations, {report['questions']} questions"
             + (f" ({report['unresolved']} left out: no evidence id names an utterance)" if report["unresolved"] else "")
             + "; share of each question's evidence utterances the context holds, mean over questions"
             + (" [95% bootstrap interval over conversations]" if intervals else
                f" (means only: intervals need at least {MIN_INTERVAL} conversations)"),
             f"| budget (tokens) | {' | '.join(NAMES[m] for m in METHODS)} |", "|---|" + "---|" * len(METHODS)]
    for b in budgets:
        lines.append(f"| {b:,} | {' | '.join(_cell(report['all'][m][b], intervals) for m in METHODS)} |")
    if kind_budget in budgets:
        lines += ["", f"by question kind, at {kind_budget:,} tokens:",
                  f"| kind | questions | {' | '.join(NAMES[m] for m in METHODS)} |", "|---|---|" + "---|" * len(METHODS)]
        for kind, by_method in report["by_kind"].items():
            count = by_method["forest"][kind_budget]["questions"]
            cells = " | ".join(_cell(by_method[m][kind_budget], intervals) for m in METHODS)
            lines.append(f"| {kind} | {count} | {cells} |")
    lines += ["", "the forest's trees; evidence together: the share of pairs of one question's evidence utterances "
                  "from different sittings that share a tree (chance: two turns drawn at random)",
              "| conversation | trees | turns per tree | largest tree | evidence together | chance |",
              "|---|---|---|---|---|---|"]
    for cid, s in report["shape"].items():
        together = "-" if np.isnan(s["evidence_together"]) else f"{s['evidence_together']:.3f} ({int(s['evidence_pairs'])} pairs)"
        lines.append(f"| {cid} | {int(s['trees'])} | {s['turns_per_tree']:.1f} | {s['largest_tree_share']:.2f} | "
                     f"{together} | {s['chance_together']:.3f} |")
    return "\n".join(lines)
