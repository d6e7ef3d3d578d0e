"""Chain-of-Agents reading: workers pass a bounded memory along the chunk order; a manager answers.

Each worker step receives the query, the previous memory and the next chunk(s), and writes the
new memory: JSON with a ``conclusion``, ``open_questions`` and ``evidence`` items citing chunk
provenance. Budgets are enforced, not hoped for: chunks are packed (and split if one alone is too
long) so that instructions + query + memory + chunk text + the reply fit ``window_tokens``, and a
memory longer than ``memory_tokens`` is cut (oldest evidence first). A malformed reply is retried
once; after that the previous memory is kept and the failure is recorded in the step.

Two kinds of worker: an LLM over the OpenAI-compatible protocol (``ChatClient``), and an extractive
worker that needs no LLM: it keeps the sentences most similar to the query (or, without a query,
to the corpus centroid) that fit the memory budget, the kept ones competing with the new ones.

Token counts use the embedder's tokenizer as an estimate of the LLM's; ``margin`` (default 10%)
of the window is left free for the difference.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.engine.chunking import Chunk

log = logging.getLogger(__name__)

WORKER_PROMPT = (
    "You are one of several worker agents reading a long text in parts. Read the text part, the "
    "question and the memory left by the previous worker, and write the updated memory: what is "
    "now known towards answering the question, what is still open, and short exact quotes as "
    "evidence, each with the number of the chunk it comes from.\n"
    "Reply with JSON only, in this form: {\"conclusion\": \"...\", \"open_questions\": [\"...\"], "
    "\"evidence\": [{\"chunk\": 0, \"quote\": \"...\"}]}. Keep the reply under %d tokens."
)
WORKER_SUMMARY_PROMPT = (
    "You are one of several worker agents reading a long text in parts. Update the running summary "
    "left by the previous worker with what the text part adds, keeping the most important points "
    "and short exact quotes as evidence, each with the number of the chunk it comes from.\n"
    "Reply with JSON only, in this form: {\"conclusion\": \"the summary\", \"open_questions\": [], "
    "\"evidence\": [{\"chunk\": 0, \"quote\": \"...\"}]}. Keep the reply under %d tokens."
)
MANAGER_PROMPT = ("You are the manager agent. Answer the question from the memory the workers wrote. "
                  "Cite chunk numbers for the evidence you use. If the memory does not hold the answer, say so.")
MANAGER_SUMMARY_PROMPT = "You are the manager agent. Write the final summary of the text from the workers' memory."
MALFORMED_NOTE = "Your previous reply was not the JSON asked for. Reply with that JSON object only."


@dataclass(frozen=True)
class Step:
    """One worker step: which chunks it read, sizes in estimated tokens, and what happened."""

    index: int
    chunks: list[int]
    prompt_tokens: int
    reply_tokens: int
    memory_tokens: int
    seconds: float
    ok: bool = True
    attempts: int = 1
    error: str | None = None
    memory: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReadResult:
    answer: str
    memory: dict[str, Any]
    order: list[int]
    steps: list[Step]

    @property
    def failures(self) -> list[Step]:
        return [s for s in self.steps if not s.ok]


def empty_memory() -> dict[str, Any]:
    return {"conclusion": "", "open_questions": [], "evidence": []}


def parse_memory(text: str) -> dict[str, Any]:
    """The memory JSON in a worker reply (tolerating a fenced code block around it); ValueError if
    it is not a JSON object with a string ``conclusion`` and list ``open_questions``/``evidence``."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body[body.find("\n") + 1:] if "\n" in body else body
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in the reply")
    data = json.loads(body[start:end + 1])
    if not isinstance(data, dict) or not isinstance(data.get("conclusion"), str) \
            or not isinstance(data.get("open_questions", []), list) or not isinstance(data.get("evidence", []), list):
        raise ValueError("reply JSON lacks conclusion (string), open_questions (list) or evidence (list)")
    return {"conclusion": data["conclusion"], "open_questions": list(data.get("open_questions", [])),
            "evidence": list(data.get("evidence", []))}


class _Tokens:
    """Estimated token counts and token-bounded cuts, with the embedder's tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def split(self, text: str, limit: int) -> list[str]:
        """``text`` cut at token boundaries into pieces of at most ``limit`` tokens."""
        offsets = self.tokenizer.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= limit:
            return [text]
        pieces, start = [], 0
        for first in range(limit, len(offsets), limit):
            cut = offsets[first][0]
            pieces.append(text[start:cut])
            start = cut
        pieces.append(text[start:])
        return [p for p in pieces if p.strip()]


def _fit_memory(memory: dict[str, Any], tokens: _Tokens, budget: int) -> tuple[dict[str, Any], int]:
    """The memory cut to ``budget`` tokens of JSON: oldest evidence first, then open questions,
    then the conclusion's tail."""
    memory = {"conclusion": memory["conclusion"], "open_questions": list(memory["open_questions"]),
              "evidence": list(memory["evidence"])}
    size = tokens.count(json.dumps(memory, ensure_ascii=False))
    while size > budget and memory["evidence"]:
        memory["evidence"].pop(0)
        size = tokens.count(json.dumps(memory, ensure_ascii=False))
    while size > budget and memory["open_questions"]:
        memory["open_questions"].pop()
        size = tokens.count(json.dumps(memory, ensure_ascii=False))
    if size > budget:
        room = max(budget - tokens.count(json.dumps({**memory, "conclusion": ""})), 0)
        memory["conclusion"] = tokens.split(memory["conclusion"], max(room, 1))[0] if room else ""
        size = tokens.count(json.dumps(memory, ensure_ascii=False))
    return memory, size


def _label(i: int, chunk: Chunk | None) -> str:
    return f"[chunk {i}" + (f" | {chunk.source} [{chunk.start}:{chunk.end}]]" if chunk else "]")


def _pack(units: list[tuple[int, str]], chunks: Sequence[Chunk | None], tokens: _Tokens,
          room: int) -> list[list[tuple[int, str]]]:
    """Consecutive (chunk id, text) units grouped so that each group's labelled text fits ``room``
    tokens; a unit longer than ``room`` is split first."""
    groups: list[list[tuple[int, str]]] = []
    used = room + 1
    for i, text in units:
        label_tokens = tokens.count(_label(i, chunks[i])) + 2
        for piece in tokens.split(text, max(room - label_tokens, 1)):
            size = label_tokens + tokens.count(piece)
            if used + size > room:
                groups.append([])
                used = 0
            groups[-1].append((i, piece))
            used += size
    return groups


def read(
    chunks: Sequence[Chunk] | Sequence[str],
    query: str | None = None,
    *,
    order: str | Sequence[int] = "bfs",
    llm: Any = None,
    memory_tokens: int = 512,
    window_tokens: int = 4096,
    margin: float = 0.1,
    prompts: dict[str, str] | None = None,
    embedder: Any = None,
    cache: Any = None,
    trace: str | Path | None = None,
    progress: bool = False,
) -> ReadResult:
    """Read ``chunks`` in ``order`` with bounded memory and answer ``query`` (or summarise).

    Parameters
    ----------
    order : a strategy of ``chunktree.order`` (``"bfs"``, ``"dfs"``, ``"document"``, ``"dense"``)
        or an explicit list of chunk indices (each chunk at most once).
    llm : a ``ChatClient``; None for the extractive worker (no LLM).
    memory_tokens : the memory's budget, in estimated tokens.
    window_tokens : the model's context window; every worker call fits in it.
    prompts : overrides for ``worker``, ``worker_summary``, ``manager``, ``manager_summary``.
    trace : a JSONL file to write one line per step to.
    """
    from chunktree.engine.order import order as cl_order

    if embedder is None:
        from chunktree.models.embedder import Embedder

        embedder = Embedder()
    items = list(chunks)
    if not items:
        raise ValueError("need at least one chunk to read; got 0")
    texts = [c.text if isinstance(c, Chunk) else c for c in items]
    provenance = [c if isinstance(c, Chunk) else None for c in items]
    if memory_tokens < 16:
        raise ValueError(f"memory_tokens must be >= 16; got {memory_tokens}")
    if isinstance(order, str):
        seq = cl_order(items, query, strategy=order, embedder=embedder, cache=cache).order.tolist()
    else:
        seq = [int(i) for i in order]
        if len(set(seq)) != len(seq) or not all(0 <= i < len(items) for i in seq):
            raise ValueError(f"order must list distinct chunk indices in [0, {len(items) - 1}]")
    tokens = _Tokens(embedder.tokenizer)
    if llm is None:
        worker = _ExtractiveWorker(texts, provenance, query, embedder, cache, tokens, memory_tokens)
        groups = [[(i, texts[i])] for i in seq]
    else:
        prompts = {"worker": WORKER_PROMPT, "worker_summary": WORKER_SUMMARY_PROMPT,
                   "manager": MANAGER_PROMPT, "manager_summary": MANAGER_SUMMARY_PROMPT, **(prompts or {})}
        worker = _LLMWorker(llm, query, prompts, tokens, memory_tokens, provenance)
        fixed = worker.fixed_tokens()
        room = int(window_tokens * (1 - margin)) - fixed - 2 * memory_tokens
        if room < 32:
            raise ValueError(f"window_tokens={window_tokens} leaves {room} tokens for text after the instructions "
                             f"({fixed}), the memory and the reply ({memory_tokens} each); raise it or lower "
                             "memory_tokens")
        groups = _pack([(i, texts[i]) for i in seq], provenance, tokens, room)

    memory = empty_memory()
    steps: list[Step] = []
    sink = open(trace, "w", encoding="utf-8") if trace else None
    try:
        iterator: Any = enumerate(groups)
        if progress:
            from tqdm.auto import tqdm

            iterator = tqdm(iterator, total=len(groups), desc="read", unit="step", delay=1.0)
        for index, group in iterator:
            step, memory = worker.step(index, group, memory)
            steps.append(step)
            if sink:
                sink.write(json.dumps(asdict(step), ensure_ascii=False) + "\n")
                sink.flush()
    finally:
        if sink:
            sink.close()
    answer = worker.answer(memory)
    return ReadResult(answer, memory, seq, steps)


class _LLMWorker:
    def __init__(self, llm: Any, query: str | None, prompts: dict[str, str], tokens: _Tokens,
                 memory_tokens: int, provenance: Sequence[Chunk | None]) -> None:
        self.llm, self.query, self.tokens, self.memory_tokens = llm, query, tokens, memory_tokens
        self.provenance = provenance
        key = "worker" if query is not None else "worker_summary"
        self.system = prompts[key] % memory_tokens if "%d" in prompts[key] else prompts[key]
        self.manager = prompts["manager" if query is not None else "manager_summary"]

    def fixed_tokens(self) -> int:
        return self.tokens.count(self.system + MALFORMED_NOTE + (self.query or "")) + 40

    def _messages(self, group: list[tuple[int, str]], memory: dict[str, Any]) -> list[dict[str, str]]:
        parts = "\n\n".join(f"{_label(i, self.provenance[i])}\n{text}" for i, text in group)
        question = f"Question: {self.query}\n\n" if self.query is not None else ""
        user = f"{question}Memory so far: {json.dumps(memory, ensure_ascii=False)}\n\nText part:\n{parts}"
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def step(self, index: int, group: list[tuple[int, str]], memory: dict[str, Any]) -> tuple[Step, dict[str, Any]]:
        from chunktree.engine.llm import LLMError

        messages = self._messages(group, memory)
        prompt_tokens = sum(self.tokens.count(m["content"]) for m in messages)
        t0 = time.perf_counter()
        error, reply_tokens = None, 0
        for attempt in (1, 2):
            try:
                reply = self.llm.complete(messages, max_tokens=self.memory_tokens)
            except LLMError as exc:
                error = str(exc)
                break
            reply_tokens = self.tokens.count(reply.text)
            try:
                new, size = _fit_memory(parse_memory(reply.text), self.tokens, self.memory_tokens)
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                error = f"malformed reply ({exc}): {reply.text[:120]!r}"
                messages = messages + [{"role": "assistant", "content": reply.text},
                                       {"role": "user", "content": MALFORMED_NOTE}]
                continue
            step = Step(index, [i for i, _ in group], prompt_tokens, reply_tokens, size,
                        time.perf_counter() - t0, ok=True, attempts=attempt, memory=new)
            return step, new
        log.warning("worker step %d failed (%s); keeping the previous memory", index, error)
        size = self.tokens.count(json.dumps(memory, ensure_ascii=False))
        step = Step(index, [i for i, _ in group], prompt_tokens, reply_tokens, size, time.perf_counter() - t0,
                    ok=False, attempts=attempt, error=error, memory=memory)
        return step, memory

    def answer(self, memory: dict[str, Any]) -> str:
        question = f"Question: {self.query}\n\n" if self.query is not None else ""
        messages = [{"role": "system", "content": self.manager},
                    {"role": "user", "content": f"{question}Memory: {json.dumps(memory, ensure_ascii=False)}"}]
        return self.llm.complete(messages).text


def split_sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of ``text`` (pysbd), whitespace trimmed."""
    import pysbd

    spans = []
    for s in pysbd.Segmenter(language="en", clean=False, char_span=True).segment(text):
        start, end = s.start, s.end
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            spans.append((start, end))
    return spans


def keep_best(candidates: list[tuple[float, int, int]], budget: int) -> list[tuple[float, int, int]]:
    """The extractive memory update: candidates (score, tokens, id) taken by descending score
    (ties: lower id first), each kept if it still fits the token budget."""
    kept, used = [], 0
    for cand in sorted(candidates, key=lambda c: (-c[0], c[2])):
        if used + cand[1] <= budget:
            kept.append(cand)
            used += cand[1]
    return kept


class _ExtractiveWorker:
    def __init__(self, texts: list[str], provenance: Sequence[Chunk | None], query: str | None, embedder: Any,
                 cache: Any, tokens: _Tokens, memory_tokens: int) -> None:
        from chunktree.engine.embedding import embed_texts

        self.texts, self.provenance, self.tokens, self.memory_tokens = texts, provenance, tokens, memory_tokens
        self.sentences: list[tuple[int, int, int]] = []  # (chunk, start, end)
        for i, text in enumerate(texts):
            self.sentences.extend((i, a, b) for a, b in split_sentences(text))
        sentence_texts = [texts[i][a:b] for i, a, b in self.sentences]
        vectors, _ = embed_texts(sentence_texts, embedder, cache)
        if query is not None:
            target = embedder.embed([query])[0]
        else:  # summarising: closeness to the whole text's centroid
            centroid = vectors.mean(axis=0)
            target = centroid / max(float(np.linalg.norm(centroid)), 1e-12)
        self.scores = vectors @ target
        self.sizes = np.array([tokens.count(t) for t in sentence_texts])
        self.by_chunk: dict[int, list[int]] = {}
        for sid, (i, _, _) in enumerate(self.sentences):
            self.by_chunk.setdefault(i, []).append(sid)
        self.kept: list[tuple[float, int, int]] = []

    def step(self, index: int, group: list[tuple[int, str]], memory: dict[str, Any]) -> tuple[Step, dict[str, Any]]:
        t0 = time.perf_counter()
        new = [(float(self.scores[s]), int(self.sizes[s]), s) for i, _ in group for s in self.by_chunk.get(i, [])]
        self.kept = keep_best(self.kept + new, self.memory_tokens)
        memory = self.memory()
        step = Step(index, [i for i, _ in group], sum(c[1] for c in new), 0, sum(c[1] for c in self.kept),
                    time.perf_counter() - t0, memory=memory)
        return step, memory

    def memory(self) -> dict[str, Any]:
        evidence = []
        for score, _, s in self.kept:
            i, a, b = self.sentences[s]
            item = {"chunk": i, "quote": self.texts[i][a:b], "score": round(score, 4)}
            chunk = self.provenance[i]
            if chunk is not None:  # offsets into the source document
                item.update(source=chunk.source, start=chunk.start + a, end=chunk.start + b)
            evidence.append(item)
        return {"conclusion": evidence[0]["quote"] if evidence else "", "open_questions": [], "evidence": evidence}

    def answer(self, memory: dict[str, Any]) -> str:
        return " ".join(e["quote"] for e in memory["evidence"])
