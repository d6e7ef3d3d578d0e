"""Evaluation data in one shape, from SQuAD-format JSON or HotpotQA-style JSONL.

A ``Passage`` is the set of paragraphs a reader orders and reads (a SQuAD article, or the 10
paragraphs of one HotpotQA question), with its ``Question``s. A question knows its gold paragraphs
(one for SQuAD, the two supporting ones for HotpotQA), its answers, the answer's character spans
when the data gives them (SQuAD), and its kind:

- ``single``: one gold paragraph (SQuAD);
- ``comparison`` (HotpotQA): the answer is yes/no, or the question names both gold paragraphs'
  titles (a title's trailing parenthesis, e.g. "(film)", is dropped; case-insensitive). Such a
  question names both entities it needs, so query similarity alone can find both;
- ``bridge`` (HotpotQA): every other two-hop question — the first gold paragraph names a bridge
  entity the question does not, and the second says something about it.

The kind is an evaluation device: it reads gold labels, and nothing that orders or reads does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunktree.checks import InvalidValueError, json_loads, one_of

FORMATS = ("auto", "squad", "hotpot")


@dataclass(frozen=True)
class Question:
    text: str
    gold: tuple[int, ...]
    answers: tuple[str, ...]
    spans: tuple[tuple[int, int, int], ...] = ()  # (paragraph, start, end) of the answer
    kind: str = "single"


@dataclass(frozen=True)
class Passage:
    paragraphs: list[str]
    questions: list[Question]


def evaluable(passages: list[Passage]) -> tuple[list[Passage], int]:
    """The passages an order can be measured on (two paragraphs or more and a question), and how
    many were left out; none is an error."""
    kept = [p for p in passages if len(p.paragraphs) >= 2 and p.questions]
    if not kept:
        raise InvalidValueError(f"nothing to evaluate: each of the {len(passages)} passages has fewer than "
                                "2 paragraphs or no question")
    return kept, len(passages) - len(kept)


def load(path: str | Path, fmt: str = "auto") -> tuple[str, list[Passage]]:
    """The passages of ``path``, and the format read (``squad`` or ``hotpot``); ``auto`` takes
    ``.jsonl`` files as HotpotQA-style and anything else as SQuAD-format."""
    one_of(fmt, "format", FORMATS)
    path = Path(path)
    if fmt == "auto":
        fmt = "hotpot" if path.suffix == ".jsonl" else "squad"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidValueError(f"{path}: cannot be read ({exc})") from None
    return fmt, (_hotpot(path, text) if fmt == "hotpot" else _squad(path, text))


def _squad(path: Path, text: str) -> list[Passage]:
    try:
        passages = []
        for article in json_loads(text)["data"]:
            paragraphs = [p["context"] for p in article["paragraphs"]]
            questions = [
                Question(qa["question"], (pid,), tuple(a["text"] for a in qa["answers"]),
                         tuple((pid, a["answer_start"], a["answer_start"] + len(a["text"])) for a in qa["answers"]))
                for pid, p in enumerate(article["paragraphs"]) for qa in p["qas"] if qa.get("answers")]
            passages.append(Passage(paragraphs, questions))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidValueError(f"{path}: not a SQuAD-format file (data -> paragraphs -> context/qas): "
                                f"{type(exc).__name__}: {exc}") from None
    return passages


def _title(title: str) -> str:
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip().lower()


def question_kind(question: str, answers: tuple[str, ...], gold_titles: list[str]) -> str:
    """``comparison`` or ``bridge`` by the rule in the module notes."""
    yes_no = bool(answers) and answers[0].strip().lower() in ("yes", "no")
    names_both = all(_title(t) and _title(t) in question.lower() for t in gold_titles)
    return "comparison" if yes_no or names_both else "bridge"


def _hotpot(path: Path, text: str) -> list[Passage]:
    passages = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row: dict[str, Any] = json_loads(line)
            paragraphs = [p["text"] for p in row["paragraphs"]]
            gold = tuple(i for i, p in enumerate(row["paragraphs"]) if p["supporting"])
            answers = tuple(row["answers"])
            titles = [row["paragraphs"][i]["title"] for i in gold]
            question = row["question"]
            odd = [t for t in (question, *paragraphs, *answers, *titles) if not isinstance(t, str)]
            if odd:
                raise TypeError(f"a question, paragraph text, title or answer is a {type(odd[0]).__name__}, "
                                f"not a string")
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidValueError(f"{path}:{number}: not a HotpotQA-style line (question, answers, paragraphs "
                                    f"with title, text, supporting): {type(exc).__name__}: {exc}") from None
        if not gold:
            raise InvalidValueError(f"{path}:{number}: no paragraph is marked supporting")
        kind = question_kind(question, answers, titles) if len(gold) >= 2 else "single"
        passages.append(Passage(paragraphs, [Question(question, gold, answers, (), kind)]))
    if not passages:
        raise InvalidValueError(f"{path}: holds no questions")
    return passages
