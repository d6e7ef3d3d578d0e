"""The memory workers pass along the order, and the record of each worker step.

The memory is JSON: a ``conclusion``, ``open_questions`` and ``evidence`` items citing chunks.
``fit_memory`` enforces its token budget (oldest evidence cut first); token counts and cuts use
the embedder's tokenizer (``Tokens``), with chunktree's convention (special tokens excluded).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from chunktree.checks import InvalidValueError, json_loads


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

    def to_dict(self, memory: bool = True) -> dict[str, Any]:
        if memory:
            return asdict(self)
        # asdict would copy every step's memory deeply only to drop it
        return {f.name: list(self.chunks) if f.name == "chunks" else getattr(self, f.name)
                for f in fields(self) if f.name != "memory"}


def empty_memory() -> dict[str, Any]:
    return {"conclusion": "", "open_questions": [], "evidence": []}


def parse_memory(text: str) -> dict[str, Any]:
    """The memory JSON in a worker reply (tolerating a fenced code block around it); a ValueError
    if it is not a JSON object with a string ``conclusion`` and list ``open_questions``/``evidence``."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body[body.find("\n") + 1:] if "\n" in body else body
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise InvalidValueError("no JSON object in the reply")
    try:
        data = json_loads(body[start:end + 1])
    except ValueError as exc:
        raise InvalidValueError(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("conclusion"), str) \
            or not isinstance(data.get("open_questions", []), list) or not isinstance(data.get("evidence", []), list):
        raise InvalidValueError("reply JSON lacks conclusion (string), open_questions (list) or evidence (list)")
    return {"conclusion": data["conclusion"], "open_questions": list(data.get("open_questions", [])),
            "evidence": list(data.get("evidence", []))}


class Tokens:
    """Token counts (``Embedder.count_tokens``) and token-bounded cuts with an embedder's tokenizer."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    def count(self, text: str) -> int:
        return int(self.embedder.count_tokens([text])[0])

    def split(self, text: str, limit: int) -> list[str]:
        """``text`` cut at token boundaries into pieces of at most ``limit`` tokens."""
        offsets = self.embedder.tokenizer.encode(text, add_special_tokens=False).offsets
        if len(offsets) <= limit:
            return [text]
        pieces, start = [], 0
        for first in range(limit, len(offsets), limit):
            cut = offsets[first][0]
            pieces.append(text[start:cut])
            start = cut
        pieces.append(text[start:])
        return [p for p in pieces if p.strip()]


def fit_memory(memory: dict[str, Any], tokens: Tokens, budget: int) -> tuple[dict[str, Any], int]:
    """The memory cut to ``budget`` tokens of JSON: oldest evidence first, then open questions,
    then the conclusion's tail. Returns the memory and its size."""
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
