"""The LLM-reader evaluation: the real Chain-of-Agents reader per question and order, scored by
SQuAD-style exact match and token F1 of the manager's answer against the gold answers.

- Every LLM call goes through ``CachedChat``: a persistent SQLite cache keyed by model and request
  (messages, max_tokens, temperature), so an interrupted run resumes and a rerun costs nothing.
- At most ``concurrency`` reads run at once (each read's worker calls are sequential by nature).
- Tokens are tallied (as the server reports them; cached calls separately).

Exact match and F1 follow the SQuAD evaluation script: lower case, punctuation and the articles
a/an/the removed, whitespace collapsed; the best over the gold answers.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import sqlite3
import string
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import integer
from chunktree.engine.embedding import embed_texts
from chunktree.engine.evaluate.data import Passage, evaluable
from chunktree.engine.evaluate.report import left_out_note
from chunktree.engine.evaluate.runner import BASELINES
from chunktree.engine.evaluate.stats import bootstrap
from chunktree.engine.order import order
from chunktree.engine.read import read
from chunktree.engine.read.llm import Completion
from chunktree.paths import cache_dir
from chunktree.progress import Progress, tracked

LLM_ORDERS = ("document", "dense", "bfs", "dense_tree", "runs")


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, answers: tuple[str, ...]) -> float:
    return float(any(normalize_answer(prediction) == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: tuple[str, ...]) -> float:
    best = 0.0
    pred = normalize_answer(prediction).split()
    for answer in answers:
        gold = normalize_answer(answer).split()
        common = sum((collections.Counter(pred) & collections.Counter(gold)).values())
        if common:
            precision, recall = common / len(pred), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
        elif not pred and not gold:
            best = 1.0
    return best


class CachedChat:
    """A ``ChatClient`` with a persistent cache of its replies, safe to share between threads.

    Parameters
    ----------
    client
        the ``ChatClient`` to call on a miss.
    path
        the SQLite file (default ``<cache dir>/llm.sqlite``).
    """

    def __init__(self, client: Any, path: str | Path | None = None) -> None:
        self.client, self.model, self.base_url = client, client.model, client.base_url
        self.path = Path(path) if path is not None else cache_dir() / "llm.sqlite"
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (key BLOB PRIMARY KEY, text TEXT NOT NULL, "
                         "prompt_tokens INTEGER, completion_tokens INTEGER) WITHOUT ROWID")
        self._lock = threading.Lock()
        self.tally = {"calls": 0, "cached": 0, "prompt_tokens": 0, "completion_tokens": 0}

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int | None = None) -> Completion:
        request = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                   "temperature": self.client.temperature}
        key = hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).digest()
        with self._lock:
            row = self._db.execute("SELECT text, prompt_tokens, completion_tokens FROM replies WHERE key = ?",
                                   (key,)).fetchone()
            self.tally["calls"] += 1
            if row is not None:
                self.tally["cached"] += 1
                return Completion(row[0], row[1], row[2], 0.0)
        reply = self.client.complete(messages, max_tokens=max_tokens)
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO replies VALUES (?, ?, ?, ?)",
                             (key, reply.text, reply.prompt_tokens, reply.completion_tokens))
            self.tally["prompt_tokens"] += reply.prompt_tokens or 0
            self.tally["completion_tokens"] += reply.completion_tokens or 0
        return reply


def evaluate_llm(
    passages: list[Passage],
    embedder: Any,
    llm: CachedChat,
    cache: Any = None,
    *,
    orders: tuple[str, ...] = LLM_ORDERS,
    memory_tokens: int = 256,
    window_tokens: int = 4096,
    concurrency: int = 4,
    progress: Progress = False,
) -> dict[str, Any]:
    """Read every question under each order with ``llm`` and score the answers; returns the
    per-kind summary (EM and F1 with bootstrap intervals and paired differences), the token tally
    and the per-question answers."""
    integer(concurrency, "concurrency", 1)
    integer(memory_tokens, "memory_tokens", 16)
    passages, left_out = evaluable(passages)
    jobs: list[tuple[Any, ...]] = []  # (question number, passage, question, order, sequence)
    for passage in passages:
        vectors, _ = embed_texts(passage.paragraphs, embedder, cache, prompt="document")
        q_vecs, _ = embed_texts([q.text for q in passage.questions], embedder, cache, prompt="query")
        for q, qv in zip(passage.questions, q_vecs):
            number = len(jobs) // len(orders)
            for name in orders:
                jobs.append((number, passage, q, name, order(vectors, qv, strategy=name).order.tolist()))

    def run(job: tuple[int, Passage, Any, str, list[int]]) -> dict[str, Any]:
        number, passage, q, name, seq = job
        result = read(passage.paragraphs, q.text, sequence=seq, llm=llm, memory_tokens=memory_tokens,
                      window_tokens=window_tokens, embedder=embedder, cache=cache)
        return {"number": number, "question": q.text, "kind": q.kind, "order": name, "answer": result.answer,
                "em": exact_match(result.answer, q.answers), "f1": token_f1(result.answer, q.answers),
                "failed_steps": len(result.failures)}

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        answers = list(tracked(pool.map(run, jobs), len(jobs), "LLM reads", "read", enabled=progress))
    return {"model": llm.model, "base_url": llm.base_url, "orders": list(orders), "memory_tokens": memory_tokens,
            "window_tokens": window_tokens, "passages_left_out": left_out, "tokens": dict(llm.tally),
            "summary": _summarise(answers, orders), "answers": answers}


def _summarise(answers: list[dict[str, Any]], orders: tuple[str, ...]) -> dict[str, Any]:
    by_question: dict[int, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
    for a in answers:
        by_question[a["number"]][a["order"]] = a
    kinds = collections.defaultdict(list)
    for per_order in by_question.values():
        kind = next(iter(per_order.values()))["kind"]
        kinds["all"].append(per_order)
        if kind != "single":
            kinds[kind].append(per_order)
    out: dict[str, Any] = {}
    for kind, rows in kinds.items():
        block: dict[str, Any] = {"questions": len(rows), "orders": {}}
        for name in orders:
            entry = {}
            for metric in ("em", "f1"):
                entry[metric] = bootstrap([r[name][metric] for r in rows])
                for b in BASELINES:
                    if b in orders and b != name:
                        entry[f"{metric} - {b}"] = bootstrap(np.array([r[name][metric] - r[b][metric] for r in rows]))
            block["orders"][name] = entry
        out[kind] = block
    return out


def format_llm_report(result: dict[str, Any]) -> str:
    """The LLM evaluation as Markdown: EM and F1 per order (95% bootstrap intervals), differences."""

    def cell(ci: dict[str, float] | None) -> str:
        return "—" if not ci else f"{100 * ci['mean']:.1f} [{100 * ci['lo']:.1f}, {100 * ci['hi']:.1f}]"

    t = result["tokens"]
    lines = [f"LLM reader {result['model']} at {result['base_url']}; memory {result['memory_tokens']} tokens, "
             f"window {result['window_tokens']}; {t['calls']} calls ({t['cached']} from the cache), "
             f"{t['prompt_tokens']} prompt + {t['completion_tokens']} completion tokens" + left_out_note(result)]
    for kind, block in result["summary"].items():
        lines += ["", f"**{kind}** ({block['questions']} questions)", "",
                  "| order | exact match % | F1 % | EM − document | EM − dense | F1 − document | F1 − dense |",
                  "|---|---|---|---|---|---|---|"]
        for name, e in block["orders"].items():
            lines.append(f"| {name} | {cell(e['em'])} | {cell(e['f1'])} | {cell(e.get('em - document'))} | "
                         f"{cell(e.get('em - dense'))} | {cell(e.get('f1 - document'))} | {cell(e.get('f1 - dense'))} |")
    return "\n".join(lines)
