"""The LLM worker: one chat-completions call per step, over any OpenAI-compatible endpoint.

Each step sends the query, the previous memory and the next chunk(s) and asks for the new memory
as JSON. Chunks are packed (and split if one alone is too long) so that instructions + query +
memory + chunk text + the reply fit the window. A malformed reply is retried once; after that the
previous memory is kept and the failure is recorded in the step.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from chunktree.checks import InvalidValueError
from chunktree.engine.chunking import Chunk
from chunktree.engine.read.llm import LLMError, LLMUnavailable
from chunktree.engine.read.memory import Step, Tokens, fit_memory, parse_memory

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


def label(i: int, chunk: Chunk | None) -> str:
    return f"[chunk {i}" + (f" | {chunk.source} [{chunk.start}:{chunk.end}]]" if chunk else "]")


def pack(units: list[tuple[int, str]], chunks: Sequence[Chunk | None], tokens: Tokens,
         room: int) -> list[list[tuple[int, str]]]:
    """Consecutive (chunk id, text) units grouped so that each group's labelled text fits ``room``
    tokens; a unit longer than ``room`` is split first."""
    groups: list[list[tuple[int, str]]] = []
    used = room + 1
    for i, text in units:
        label_tokens = tokens.count(label(i, chunks[i])) + 2
        for piece in tokens.split(text, max(room - label_tokens, 1)):
            size = label_tokens + tokens.count(piece)
            if used + size > room:
                groups.append([])
                used = 0
            groups[-1].append((i, piece))
            used += size
    return groups


class LLMWorker:
    """Worker steps and the manager's answer through ``llm`` (a ``ChatClient``)."""

    def __init__(self, llm: Any, query: str | None, prompts: dict[str, str], tokens: Tokens,
                 memory_tokens: int, provenance: Sequence[Chunk | None]) -> None:
        self.llm, self.query, self.tokens, self.memory_tokens = llm, query, tokens, memory_tokens
        self.provenance = provenance
        key = "worker" if query is not None else "worker_summary"
        self.system = prompts[key] % memory_tokens if "%d" in prompts[key] else prompts[key]
        self.manager = prompts["manager" if query is not None else "manager_summary"]

    def fixed_tokens(self) -> int:
        return self.tokens.count(self.system + MALFORMED_NOTE + (self.query or "")) + 40

    def _messages(self, group: list[tuple[int, str]], memory: dict[str, Any]) -> list[dict[str, str]]:
        parts = "\n\n".join(f"{label(i, self.provenance[i])}\n{text}" for i, text in group)
        question = f"Question: {self.query}\n\n" if self.query is not None else ""
        user = f"{question}Memory so far: {json.dumps(memory, ensure_ascii=False)}\n\nText part:\n{parts}"
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def step(self, index: int, group: list[tuple[int, str]], memory: dict[str, Any]) -> tuple[Step, dict[str, Any]]:
        messages = self._messages(group, memory)
        prompt_tokens = sum(self.tokens.count(m["content"]) for m in messages)
        t0 = time.perf_counter()
        error, reply_tokens = None, 0
        for attempt in (1, 2):
            try:
                reply = self.llm.complete(messages, max_tokens=self.memory_tokens)
            except LLMUnavailable:
                raise  # the endpoint is down or the run's time is spent: no step left would fare better
            except LLMError as exc:
                error = str(exc)
                break
            reply_tokens = self.tokens.count(reply.text)
            try:
                new, size = fit_memory(parse_memory(reply.text), self.tokens, self.memory_tokens)
            except InvalidValueError as exc:
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
        # Bounded like the workers' replies: a model that never stops would otherwise fill its context.
        return self.llm.complete(messages, max_tokens=self.memory_tokens).text
