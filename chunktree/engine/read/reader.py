"""Chain-of-Agents reading: workers pass a bounded memory along the chunk order; a manager answers.

Each worker step receives the query, the previous memory and the next chunk(s), and writes the
new memory (``memory``): JSON with a ``conclusion``, ``open_questions`` and ``evidence`` items
citing chunk provenance. Budgets are enforced, not hoped for: the memory never exceeds
``memory_tokens``, and every LLM call fits ``window_tokens``.

Two kinds of worker: an LLM over the OpenAI-compatible protocol (``llm_worker``), and an
extractive worker that needs no LLM (``extractive``).

Token counts use the embedder's tokenizer as an estimate of the LLM's; ``margin`` (default 10%)
of the window is left free for the difference.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunktree.checks import InvalidValueError, integer, normalised, number, one_of, text
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.chunking import Chunk
from chunktree.engine.embedding import embed_texts
from chunktree.engine.inputs import default_embedder, texts_of
from chunktree.engine.memory import StageMeter
from chunktree.engine.order import DEFAULT_STRATEGY, STRATEGIES, OrderResult, order
from chunktree.engine.read.extractive import (
    ASKS_ABOUT_BOILERPLATE,
    DEFAULT_MEMORY_WEIGHT,
    ExtractiveWorker,
    Sentences,
    lexical_index,
    query_scores,
)
from chunktree.engine.read.llm_worker import (
    MANAGER_PROMPT,
    MANAGER_SUMMARY_PROMPT,
    WORKER_PROMPT,
    WORKER_SUMMARY_PROMPT,
    LLMWorker,
    pack,
)
from chunktree.engine.read.memory import Step, Tokens, empty_memory
from chunktree.engine.results import dumps
from chunktree.files import replacing
from chunktree.progress import Progress, tracked

PROMPT_KEYS = ("worker", "worker_summary", "manager", "manager_summary")


@dataclass(frozen=True)
class ReadResult:
    """What a Chain-of-Agents read produced.

    Attributes
    ----------
    answer
        the manager's answer (or summary).
    memory
        the last memory.
    order
        the chunk indices in the order they were read.
    steps
        one ``Step`` per worker call.
    strategy
        the order's strategy, or ``"given"`` for an explicit sequence.
    reader
        ``"extractive"`` or ``"llm"``.
    params
        memory and window budgets, the model (LLM), the query.
    timings
        seconds per stage (``order_s``, ``read_s``, ``answer_s``, ``total_s``).
    items
        the chunks or strings that were read from (``order`` indexes them).
    ordered
        the ``OrderResult`` the reading order came from (its tree, similarities and memory), or
        None for a ``sequence`` given.
    peak_memory_mb
        peak resident memory of the process in MB during each stage (``order``, ``read``,
        ``answer``; ``engine.memory.StageMeter``); empty where the platform has no ``/proc``.
    """

    answer: str
    memory: dict[str, Any]
    order: list[int]
    steps: list[Step]
    strategy: str = "given"
    reader: str = "extractive"
    params: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    items: Sequence[Chunk] | Sequence[str] | None = field(default=None, repr=False)
    ordered: OrderResult | None = field(default=None, repr=False)
    peak_memory_mb: dict[str, float] = field(default_factory=dict)

    @property
    def failures(self) -> list[Step]:
        return [s for s in self.steps if not s.ok]

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready result; steps without their memories (the trace file has those)."""
        return {"answer": self.answer, "memory": self.memory, "order": list(self.order), "strategy": self.strategy,
                "reader": self.reader, "params": dict(self.params), "timings": dict(self.timings),
                "memory_mb": dict(self.peak_memory_mb),
                "failures": len(self.failures), "steps": [s.to_dict(memory=False) for s in self.steps]}


def read(
    chunks: Sequence[Chunk] | Sequence[str],
    query: str | None = None,
    *,
    strategy: str = DEFAULT_STRATEGY,
    sequence: Sequence[int] | None = None,
    llm: Any = None,
    memory_weight: float = DEFAULT_MEMORY_WEIGHT,
    memory_tokens: int = 512,
    window_tokens: int = 4096,
    margin: float = 0.1,
    prompts: dict[str, str] | None = None,
    embedder: Any = None,
    cache: EmbeddingCache | None = None,
    trace: str | Path | None = None,
    progress: Progress = False,
) -> ReadResult:
    """Read ``chunks`` in order with bounded memory and answer ``query`` (or summarise).

    Parameters
    ----------
    strategy
        how ``chunktree.order`` orders the chunks (one of ``chunktree.engine.order.STRATEGIES``);
        ignored when ``sequence`` is given.
    sequence
        an explicit reading order (distinct chunk indices, not necessarily all).
    llm
        a ``ChatClient``; None for the extractive worker (no LLM).
    memory_weight
        the extractive worker's weight of similarity to what its memory holds (0: the
        query-only worker; see ``engine.read.extractive``).
    memory_tokens
        the memory's budget, in estimated tokens.
    window_tokens
        the model's context window; every worker call fits in it.
    prompts
        overrides for ``worker``, ``worker_summary``, ``manager``, ``manager_summary``.
    trace
        a JSONL file to write one line per step to.
    """
    t0 = time.perf_counter()
    items = list(chunks)
    if not items:
        raise InvalidValueError("need at least one chunk to read; got 0")
    texts = texts_of(items)
    if query is not None:
        text(query, "query")
    integer(memory_tokens, "memory_tokens", 16)
    integer(window_tokens, "window_tokens", 1)
    number(margin, "margin", 0.0, 0.9)
    number(memory_weight, "memory_weight", 0.0)
    unknown = sorted(set(prompts or {}) - set(PROMPT_KEYS))
    if unknown:
        raise InvalidValueError(f"prompts keys must be among {list(PROMPT_KEYS)}; got {unknown}")
    if sequence is None:
        one_of(strategy, "strategy", STRATEGIES)
    else:
        seq = [integer(i, "sequence[...]") for i in sequence]
        if len(set(seq)) != len(seq) or not all(0 <= i < len(items) for i in seq):
            raise InvalidValueError(f"sequence must list distinct chunk indices in [0, {len(items) - 1}]")
    embedder = embedder or default_embedder()
    tokens = Tokens(embedder)
    provenance = [c if isinstance(c, Chunk) else None for c in items]
    if llm is not None:
        prompts = {"worker": WORKER_PROMPT, "worker_summary": WORKER_SUMMARY_PROMPT,
                   "manager": MANAGER_PROMPT, "manager_summary": MANAGER_SUMMARY_PROMPT, **(prompts or {})}
        worker: Any = LLMWorker(llm, query, prompts, tokens, memory_tokens, provenance)
        fixed = worker.fixed_tokens()
        room = int(window_tokens * (1 - margin)) - fixed - 2 * memory_tokens
        if room < 32:
            raise InvalidValueError(f"window_tokens={window_tokens} leaves {room} tokens for text after the "
                                    f"instructions ({fixed}), the memory and the reply ({memory_tokens} each); "
                                    "raise it or lower memory_tokens")
    with StageMeter() as meter:  # each stage's peak memory; its sampling thread ends with the call
        ordered = None
        if sequence is None:
            ordered = order(items, query, strategy=strategy, embedder=embedder, cache=cache,  # type: ignore[arg-type]  # chunks or strings
                            progress=progress)
            seq = ordered.order.tolist()
        meter.mark("order")
        t1 = time.perf_counter()
        if llm is None:
            worker = _extractive_worker(texts, provenance, query, embedder, cache, memory_tokens, memory_weight, progress)
            groups = [[(i, texts[i])] for i in seq]
        else:
            groups = pack([(i, texts[i]) for i in seq], provenance, tokens, room)

        memory = empty_memory()
        steps: list[Step] = []
        with replacing(trace) if trace else contextlib.nullcontext() as sink:
            for index, group in tracked(enumerate(groups), len(groups), "read", "step", enabled=progress):
                step, memory = worker.step(index, group, memory)
                steps.append(step)
                if sink:
                    sink.write(dumps(step.to_dict()) + "\n")
        t2 = time.perf_counter()
        meter.mark("read")
        answer = worker.answer(memory)
        t3 = time.perf_counter()
        meter.mark("answer")
        params = {"query": query, "memory_tokens": memory_tokens, "window_tokens": window_tokens, "margin": margin,
                  "model": getattr(llm, "model", None), "memory_weight": memory_weight if llm is None else None}
        timings = {"order_s": t1 - t0, "read_s": t2 - t1, "answer_s": t3 - t2, "total_s": t3 - t0}
        return ReadResult(answer, memory, seq, steps, "given" if sequence is not None else strategy,
                          "extractive" if llm is None else "llm", params, timings, chunks, ordered,
                          dict(meter.peaks))


def _extractive_worker(texts: list[str], provenance: list[Chunk | None], query: str | None, embedder: Any,
                       cache: EmbeddingCache | None, memory_tokens: int, memory_weight: float,
                       progress: Progress = False) -> ExtractiveWorker:
    """The extractive worker for these texts: sentences scored by similarity to the query and
    their words' match with it (``query_scores``), or without a query by similarity to the
    centroid of all sentences; licence and copyright lines only for a query that asks about them."""
    boilerplate = query is not None and bool(ASKS_ABOUT_BOILERPLATE.search(query))
    sentences = Sentences.of(texts, embedder, cache, progress=progress, boilerplate=boilerplate)
    if query is None:  # summarising: closeness to the whole text's centroid
        scores = sentences.vectors @ normalised(sentences.vectors.mean(axis=0))
    else:
        target = embed_texts([query], embedder, cache, prompt="query")[0][0]
        scores = query_scores(sentences, lexical_index(sentences, texts), query, target)
    return ExtractiveWorker(sentences, scores, memory_tokens, texts, provenance, memory_weight)
