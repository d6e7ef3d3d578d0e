"""Dialogues with known topics, for fitting and measuring the topic forest.

- ``Turn``: one turn of a stitched or labelled dialogue with its gold topic (``story``);
- ``load_stories`` and ``stitch``: dialogues stitched from a CoQA or SQuAD file's stories,
  interleaved, with returns;
- ``LabelledDialogue`` and ``load_labelled``: dialogues with a topic per turn from a segmentation
  file, a CoQA or SQuAD file or a JSONL file of turns;
- ``labelled_turns``, ``has_returns``: what the fit and the evaluation read of them;
- ``SegmentedDialogue`` and ``load_segmentation``: a dialogue segmentation benchmark's file
  (DialSeg711, TIAGE, SuperDialseg), ``is_segmentation_file`` and ``sniff`` to tell one;
- ``is_locomo``: whether a file is LoCoMo's (long conversations with questions, read by
  ``locomo.load_locomo``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, json_loads
from chunktree.track.dialogue import read_dialogue


@dataclass(frozen=True)
class Turn:
    user: str
    assistant: str
    story: int


def load_stories(path: str | Path) -> list[list[tuple[str, str]]]:
    """Each story's (question, answer) turns, in the file's order, from a CoQA file (a story: a
    source text and its conversation) or a SQuAD file (a story: an article, its paragraphs'
    questions in order, each with its first answer). Stories of fewer than two questions are left
    out."""
    path = Path(path)
    try:
        data = json_loads(path.read_text(encoding="utf-8"))["data"]
        stories = []
        for record in data:
            if "paragraphs" in record:
                stories.append([(qa["question"], qa["answers"][0]["text"] if qa.get("answers") else "")
                                for paragraph in record["paragraphs"] for qa in paragraph["qas"]])
            else:
                answers = {a["turn_id"]: a["input_text"] for a in record["answers"]}
                stories.append([(q["input_text"], answers.get(q["turn_id"]) or "") for q in record["questions"]])
        if not all(isinstance(x, str) for story in stories for turn in story for x in turn):
            raise TypeError("a question or answer is not a string")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise InvalidValueError(f"{path}: not a CoQA or SQuAD JSON file ({type(exc).__name__}: {exc})") from None
    stories = [s for s in stories if len(s) >= 2]
    if len(stories) < 4:
        raise InvalidValueError(f"{path}: {len(stories)} stories of two or more questions; stitching needs at least 4")
    return stories


def stitch(stories: list[list[tuple[str, str]]], length: int, seed: int, p_return: float = 0.4) -> list[Turn]:
    """A dialogue of ``length`` turns: stretches of 2-6 turns, each from a new story or (with
    ``p_return``) a return to an unfinished earlier one, never the same story twice in a row."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(stories)).tolist()
    cursor: dict[int, int] = {}
    turns: list[Turn] = []
    current = None
    while len(turns) < length:
        open_ = [s for s, c in cursor.items() if c < len(stories[s]) and s != current]
        if open_ and rng.random() < p_return:
            story = open_[int(rng.integers(len(open_)))]
        else:
            if not order:
                break
            story = order.pop()
        stretch = int(rng.integers(2, 7))
        start = cursor.get(story, 0)
        for q, a in stories[story][start:start + stretch]:
            turns.append(Turn(q, a, story))
        cursor[story] = min(len(stories[story]), start + stretch)
        current = story
    return turns[:length]


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


def is_segmentation_file(data: Any) -> bool:
    """Whether parsed JSON looks like a segmentation file (a list of dialogues with segments)."""
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "segments" in data[0]


def read_json(path: Path) -> Any:
    """The parsed JSON file at ``path``; one that cannot be read or parsed is an error naming it."""
    try:
        return json_loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidValueError(f"{path}: not a JSON file ({type(exc).__name__}: {exc})") from None


SESSION = re.compile(r"session_(\d+)")  # a LoCoMo sitting's utterances


def locomo_sittings(record: Any) -> dict[str, Any] | None:
    """The part of a LoCoMo conversation record that holds its sittings (the record itself, or its
    ``conversation`` object), or None when it has none."""
    if not isinstance(record, dict):
        return None
    inner = record.get("conversation")
    holder = inner if isinstance(inner, dict) else record
    return holder if any(SESSION.fullmatch(k) for k in holder) else None


def is_locomo(data: Any) -> bool:
    """Whether parsed JSON looks like a LoCoMo file: a list of conversations with sittings and ``qa``."""
    return (isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "qa" in data[0]
            and locomo_sittings(data[0]) is not None)


def sniff(path: str | Path) -> str:
    """``"segmentation"`` when the file at ``path`` is a segmentation file, ``"locomo"`` when it is
    a LoCoMo file (``is_locomo``), else ``"other"``."""
    try:
        data = json_loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "other"
    return "segmentation" if is_segmentation_file(data) else "locomo" if is_locomo(data) else "other"


def load_segmentation(path: str | Path) -> list[SegmentedDialogue]:
    """The dialogues of a segmentation file; a malformed one is an error naming its index."""
    path = Path(path)
    data = read_json(path)
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


@dataclass(frozen=True)
class LabelledDialogue:
    """A dialogue with a gold topic per turn: ``turns`` of (user, assistant or None, topic);
    ``source`` names where it came from (``fit`` gives every source the same weight)."""

    id: str
    turns: list[tuple[str, str | None, str]]
    source: str = ""


def labelled_turns(dialogue: LabelledDialogue) -> list[Turn]:
    """A labelled dialogue's turns, each topic numbered (``Turn.story``) in order of first appearance."""
    ids = {topic: i for i, topic in enumerate(dict.fromkeys(t[2] for t in dialogue.turns))}
    return [Turn(user, assistant or "", ids[topic]) for user, assistant, topic in dialogue.turns]


def has_returns(dialogue: LabelledDialogue) -> bool:
    """Whether a topic comes back after another one."""
    seen, last = set(), None
    for _, _, topic in dialogue.turns:
        if topic != last and topic in seen:
            return True
        seen.add(topic)
        last = topic
    return False


def load_labelled(path: str | Path, *, stitched: int = 60, length: int = 40,
                  seed: int = 0) -> list[LabelledDialogue]:
    """Dialogues with a topic per turn, from any of:

    - a segmentation file (``segmentation.load_segmentation``): each segment its own topic;
    - a CoQA or SQuAD JSON file: ``stitched`` dialogues of ``length`` turns stitched from the
      first half of its stories, with returns (``stitch``; the evaluation uses the second);
    - a JSONL file: one turn a line, ``user``, ``topic`` (any string or number: turns with equal
      topics are of one topic), optional ``assistant`` and ``conversation``.
    """
    path = Path(path)
    if path.suffix == ".jsonl":
        return _load_jsonl(path)
    data = read_json(path)
    if is_segmentation_file(data):
        return [LabelledDialogue(d.id, [(u, None, f"segment {j}") for u, j in
                                        zip(d.utterances, np.repeat(np.arange(len(d.segments)), d.segments))], path.name)
                for d in load_segmentation(path)]
    if isinstance(data, dict) and "data" in data:
        stories = load_stories(path)
        half = stories[:len(stories) // 2]
        return [LabelledDialogue(f"{path.stem} {i}", [(t.user, t.assistant, f"story {t.story}")
                                                      for t in stitch(half, length, seed * 1000 + i)], path.name)
                for i in range(stitched)]
    raise InvalidValueError(f"{path}: not a segmentation file, a CoQA or SQuAD file or a JSONL file of turns with "
                            f"topics")


def _load_jsonl(path: Path) -> list[LabelledDialogue]:
    return [LabelledDialogue(name, [(user, assistant, str(topic)) for user, assistant, topic in turns], path.name)
            for name, turns in read_dialogue(path, topics=True).items()]
