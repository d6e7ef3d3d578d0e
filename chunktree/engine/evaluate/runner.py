"""Run every order, and each extractive reader, over every question; summarise with CIs.

Per question and order (positions are 0-based; a passage has n paragraphs):

- ``later_gold``: where the last gold paragraph comes, as a fraction (0 first, 1 last) — how far
  a bounded reader must read to have met all it needs;
- two-gold questions: ``gap`` (positions between the two gold paragraphs), ``adjacent``
  (gap 1) and ``first3`` (both among the first three);
- ``entity_distance`` (SQuAD): mean normalised distance between the paragraphs that contain the
  answer text, for questions where several do.

Per question, order and reader (the extractive worker that ships, ``engine.read.extractive``, with
a memory of ``budget`` x the passage's tokens):

- ``gold_all``: every gold paragraph still has a sentence in memory at the end; ``gold_each``:
  the share of gold paragraphs that do;
- ``answer_held``: the answer is in memory — its span inside a kept sentence (SQuAD), or its text
  inside the kept text (HotpotQA; yes/no answers are not counted).

Per two-gold question: ``tree_edge``, whether the gold paragraphs are joined by an edge of the
Chow-Liu tree (when a tree order is among the orders). Each record also keeps the question, the
passage's paragraph count and, per order, the gold paragraphs' positions (``gold``: what
``engine.pictures.eval_figure`` draws). Means come with 95% bootstrap intervals over questions, and every order with its
paired difference from ``document`` and from ``dense`` (same questions, same resamples).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, number
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.engine.evaluate.data import Passage, Question, evaluable
from chunktree.engine.evaluate.stats import bootstrap
from chunktree.engine.order import DEFAULT_BLEND, order
from chunktree.engine.read.extractive import (
    MEMORY_AWARE_WEIGHT,
    ExtractiveWorker,
    Sentences,
    lexical_index,
    query_scores,
)
from chunktree.progress import Progress, tracked

ORDERS = ("document", "dense", "bfs", "dfs", "guided", "dense_tree", "runs", "random")
READERS = {"query": 0.0, "memory": MEMORY_AWARE_WEIGHT}  # reader name -> memory_weight
POSITION_METRICS = ("later_gold", "gap", "adjacent", "first3", "entity_distance")
READER_METRICS = ("gold_all", "gold_each", "answer_held")
BASELINES = ("document", "dense")


def _positions(seq: np.ndarray, q: Question, paragraphs: list[str]) -> dict[str, float]:
    n = len(seq)
    pos = np.empty(n, dtype=np.int64)
    pos[seq] = np.arange(n)
    gold = pos[list(q.gold)]
    m: dict[str, float] = {"later_gold": float(gold.max()) / max(n - 1, 1)}
    if len(q.gold) == 2:
        gap = int(gold.max() - gold.min())
        m.update(gap=float(gap), adjacent=float(gap == 1), first3=float(gold.max() < 3))
    if q.spans:
        texts = {a.strip().lower() for a in q.answers if a.strip()}
        bearing = [j for j, p in enumerate(paragraphs) if any(t in p.lower() for t in texts)]
        if len(bearing) >= 2:
            m["entity_distance"] = float(np.mean([abs(pos[a] - pos[b]) / (n - 1)
                                                  for a, b in itertools.combinations(bearing, 2)]))
    return m


def _retention(worker: ExtractiveWorker, q: Question, paragraphs: list[str]) -> dict[str, float]:
    s = worker.sentences
    kept = worker.kept_sentences()
    held = {int(s.chunk[j]) for j in kept}
    m = {"gold_all": float(all(g in held for g in q.gold)),
         "gold_each": float(np.mean([g in held for g in q.gold]))}
    if q.spans:
        m["answer_held"] = float(any(s.chunk[j] == p and s.start[j] <= a and b <= s.end[j]
                                     for j in kept for p, a, b in q.spans))
    else:
        answers = [a.strip().lower() for a in q.answers if a.strip().lower() not in ("", "yes", "no")]
        if answers:
            text = " ".join(paragraphs[int(s.chunk[j])][int(s.start[j]):int(s.end[j])] for j in kept).lower()
            m["answer_held"] = float(any(a in text for a in answers))
    return m


def evaluate_orders(
    passages: list[Passage],
    embedder: Any,
    cache: EmbeddingCache | None = None,
    *,
    budget: float = 0.1,
    orders: tuple[str, ...] = ORDERS,
    readers: dict[str, float] | None = None,
    blend: float = DEFAULT_BLEND,
    seed: int = 0,
    progress: Progress = False,
) -> dict[str, Any]:
    """Evaluate ``orders`` with each reader of ``readers`` (name -> memory_weight; default both
    shipped readers) on ``passages``; ``blend`` is the ``guided`` order's. Returns the summary
    (``summarise``) and the per-question records."""
    number(budget, "budget (a fraction of the passage)", 0.0, 1.0, low_open=True)
    unknown = sorted(set(orders) - set(ORDERS))
    if unknown:
        raise InvalidValueError(f"orders must be among {list(ORDERS)}; got {unknown}")
    readers = dict(READERS if readers is None else readers)
    for name, weight in readers.items():
        number(weight, f"memory weight of reader {name!r}", 0.0)
    passages, left_out = evaluable(passages)
    records: list[dict[str, Any]] = []
    for passage in tracked(passages, len(passages), "passages", "passage", enabled=progress):
        paragraphs, n = passage.paragraphs, len(passage.paragraphs)
        sentences = Sentences.of(paragraphs, embedder, cache)
        words = lexical_index(sentences, paragraphs)  # once a passage, for each of its questions
        para_vecs, _ = embed_texts(paragraphs, embedder, cache, prompt="document")
        memory_budget = max(1, round(budget * int(embedder.count_tokens(paragraphs).sum())))
        q_vecs, _ = embed_texts([q.text for q in passage.questions], embedder, cache, prompt="query")
        for q, qv in zip(passage.questions, q_vecs):
            scores = query_scores(sentences, words, q.text, qv)
            record: dict[str, Any] = {"kind": q.kind, "question": q.text, "paragraphs": n, "orders": {}}
            for name in orders:
                if name == "random":
                    seq = np.random.default_rng([seed, len(records)]).permutation(n)
                else:
                    result = order(para_vecs, qv, strategy=name, blend=blend)
                    seq = result.order
                    if result.parent is not None and len(q.gold) == 2 and "tree_edge" not in record:
                        a, b = q.gold
                        record["tree_edge"] = float(result.parent[a] == b or result.parent[b] == a)
                where = np.empty(n, dtype=np.int64)
                where[seq] = np.arange(n)
                m = {"positions": _positions(seq, q, paragraphs), "gold": sorted(where[list(q.gold)].tolist())}
                for reader, weight in readers.items():
                    worker = ExtractiveWorker(sentences, scores, memory_budget, paragraphs, memory_weight=weight)
                    for pid in seq.tolist():
                        worker.read(pid)
                    m[reader] = _retention(worker, q, paragraphs)
                record["orders"][name] = m
            records.append(record)
    return {"budget": budget, "seed": seed, "readers": readers, "orders": list(orders), "blend": blend,
            "passages_left_out": left_out,
            "summary": summarise(records, list(orders), list(readers), seed), "records": records}


def summarise(records: list[dict[str, Any]], orders: list[str], readers: list[str], seed: int = 0) -> dict[str, Any]:
    """Per question kind (and ``all``): per order, each metric's mean with its 95% interval, and
    its paired difference from each baseline."""
    kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        kinds["all"].append(r)
        kinds[r["kind"]].append(r)
    out: dict[str, Any] = {}
    for kind, rows in kinds.items():
        if kind != "all" and len(kinds) == 2:  # one kind only: "all" says it
            continue
        block: dict[str, Any] = {"questions": len(rows),
                                 "tree_edge": bootstrap([r["tree_edge"] for r in rows if "tree_edge" in r], seed=seed),
                                 "orders": {}}
        for name in orders:
            entry: dict[str, Any] = {}
            for group, metrics in [("positions", POSITION_METRICS)] + [(rd, READER_METRICS) for rd in readers]:
                for metric in metrics:
                    pairs = [(r["orders"][name][group].get(metric), {b: r["orders"][b][group].get(metric)
                                                                      for b in BASELINES if b in r["orders"]})
                             for r in rows]
                    values = [v for v, _ in pairs if v is not None]
                    if not values:
                        continue
                    key = metric if group == "positions" else f"{group}:{metric}"
                    entry[key] = bootstrap(values, seed=seed)
                    for b in BASELINES:
                        if b in orders and b != name:
                            diffs = [v - base[b] for v, base in pairs if v is not None and base.get(b) is not None]
                            entry[f"{key} - {b}"] = bootstrap(diffs, seed=seed)
            block["orders"][name] = entry
        out[kind] = block
    return out
