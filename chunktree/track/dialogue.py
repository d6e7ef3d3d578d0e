"""Dialogues on disk: the JSONL turns ``chunktree track`` and ``train-track`` read, and the file a
conversation is kept in (``conversation_file``), named so that no id can reach outside its folder."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from chunktree.checks import InvalidValueError, json_loads, unicode


def read_dialogue(path: str | os.PathLike[str], *, topics: bool = False, file_ids: bool = False
                  ) -> dict[str, list[tuple[str, str | None, str | None]]]:
    """A JSONL dialogue: one turn a line, ``user`` (required), ``assistant`` and ``conversation``
    (optional) and, with ``topics``, a ``topic`` (a string or an integer) each. Turns by
    conversation, in file order, as (user, assistant, topic); every line checked before anything
    is embedded, a bad one named by its line. With ``file_ids`` each conversation id must also
    name a file (``conversation_file``)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidValueError(f"{path}: cannot read the dialogue ({exc})") from None
    conversations: dict[str, list[tuple[str, str | None, str | None]]] = {}
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            turn = json_loads(line)
        except ValueError as exc:
            raise InvalidValueError(f"{path}:{line_no}: invalid JSON ({exc})") from None
        if not isinstance(turn, dict) or not isinstance(turn.get("user"), str) or not turn["user"].strip():
            raise InvalidValueError(f"{path}:{line_no}: a turn must be a JSON object with a non-empty 'user' string")
        assistant = turn.get("assistant")
        if assistant is not None and not isinstance(assistant, str):
            raise InvalidValueError(f"{path}:{line_no}: 'assistant' must be a string; got {type(assistant).__name__}")
        conversation = turn.get("conversation", "default")
        if not isinstance(conversation, str):
            raise InvalidValueError(f"{path}:{line_no}: 'conversation' must be a string (1 and \"1\" would be one "
                                    f"conversation); got {type(conversation).__name__} {conversation!r:.40}")
        try:
            for field in ("user", "assistant"):
                unicode(turn.get(field) or "", f"'{field}'")
            if file_ids:
                conversation_file(".", conversation)
        except InvalidValueError as exc:
            raise InvalidValueError(f"{path}:{line_no}: {exc}") from None
        topic = turn.get("topic")
        if topics and (not isinstance(topic, (str, int)) or isinstance(topic, bool)):
            raise InvalidValueError(f"{path}:{line_no}: a turn needs a 'topic' (a string or an integer)")
        conversations.setdefault(conversation, []).append(
            (turn["user"], assistant, None if topic is None else str(topic)))
    if not conversations:
        raise InvalidValueError(f"{path}: holds no turns")
    return conversations


CONVERSATION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def conversation_file(folder: str | os.PathLike[str], conversation_id: Any) -> Path:
    """The file that keeps conversation ``conversation_id`` in ``folder``: ``<id>.json``. An id is
    a string of 1-64 letters, digits, '-' or '_', so a name from the input can never reach
    outside ``folder``; anything else raises ``InvalidValueError`` naming it. The CLI's
    ``track --save`` and the service's conversations folder both name files by this."""
    if not isinstance(conversation_id, str) or not CONVERSATION_ID.fullmatch(conversation_id):
        raise InvalidValueError(f"a conversation id is a string of 1-64 letters, digits, '-' or '_'; "
                                f"got {conversation_id!r:.80}")
    return Path(folder) / f"{conversation_id}.json"
