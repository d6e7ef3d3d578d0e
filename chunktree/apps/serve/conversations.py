"""Conversations held by the service: topic forests by id, bounded, optionally kept on disk.

At most ``max_conversations`` forests are held in memory; adding one more evicts the least
recently used. With a folder (``chunktree serve --conversations DIR``) every forest is saved
after each turn (``DIR/<id>.json``, the format of ``Forest.save``, each turn appended to its
journal ``DIR/<id>.json.journal``: ``Forest.save_turn``), so an evicted conversation,
or one from before a restart, is loaded again when it is next used. Without a folder an evicted
conversation is gone (404 afterwards; counted in ``/metrics``). Turns of one conversation are
placed one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from chunktree.apps.serve.http import HTTPError
from chunktree.checks import InvalidValueError
from chunktree.track.dialogue import conversation_file

log = logging.getLogger(__name__)


class Conversations:
    """Forests by id, least recently used first, with a lock per conversation."""

    def __init__(self, max_conversations: int, folder: Path | None, metrics: Any) -> None:
        self.max_conversations, self.folder, self._metrics = max_conversations, folder, metrics
        self._forests: OrderedDict[str, Any] = OrderedDict()
        self._locks: dict[str, list[Any]] = {}  # id -> [lock, requests holding or waiting for it]

    @staticmethod
    def check_id(conversation_id: Any) -> str:
        try:
            conversation_file(".", conversation_id)
        except InvalidValueError as exc:
            raise HTTPError(422, str(exc), "id") from None
        return conversation_id

    def _file(self, conversation_id: str) -> Path | None:
        return None if self.folder is None else conversation_file(self.folder, conversation_id)

    def exists(self, conversation_id: str) -> bool:
        path = self._file(conversation_id)
        return conversation_id in self._forests or (path is not None and path.is_file())

    @contextlib.asynccontextmanager
    async def locked(self, conversation_id: str) -> AsyncIterator[None]:
        """Hold the conversation's lock: every read and write of a conversation, its reload after
        an eviction included, runs under it, one at a time. The lock exists only while requests
        for the id are in flight, so the table stays as small as the traffic."""
        self.check_id(conversation_id)
        entry = self._locks.setdefault(conversation_id, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._locks.pop(conversation_id, None)

    def create(self, conversation_id: str | None, make: Any) -> tuple[str, Any]:
        """A new conversation (a fresh id when None); 409 if the id is taken."""
        conversation_id = uuid.uuid4().hex if conversation_id is None else self.check_id(conversation_id)
        if self.exists(conversation_id):
            raise HTTPError(409, f"the conversation {conversation_id!r} exists already", "id",
                            code="conversation_exists")
        forest = make()
        try:
            self.save(conversation_id, forest)  # saved first: a failed create takes nothing
        except OSError as exc:
            raise HTTPError(500, f"the conversation could not be saved ({exc.strerror or exc})") from None
        self._hold(conversation_id, forest)
        return conversation_id, forest

    async def get(self, conversation_id: str, load: Any) -> Any:
        """The forest of ``conversation_id`` (loaded from the folder when it is not held, in a worker
        thread: a long conversation takes a second or more to read, and the event loop serves
        everyone else meanwhile), or 404."""
        self.check_id(conversation_id)
        if conversation_id in self._forests:
            self._forests.move_to_end(conversation_id)
            return self._forests[conversation_id]
        path = self._file(conversation_id)
        if path is None or not path.is_file():
            raise HTTPError(404, f"no conversation {conversation_id!r} (never made, deleted, or evicted without "
                                 "a --conversations folder)", "id", code="conversation_not_found")
        forest = await asyncio.to_thread(load, path)
        self._hold(conversation_id, forest)
        return forest

    def save(self, conversation_id: str, forest: Any, turn: bool = False) -> None:
        """Write the forest to the folder, if there is one: whole, or (``turn``) its newest turn
        appended to the file's journal (``Forest.save_turn``)."""
        path = self._file(conversation_id)
        if path is not None:
            forest.save_turn(path) if turn else forest.save(path)

    def forget(self, conversation_id: str) -> None:
        """Drop the forest held in memory (the folder's copy, if any, is what a next request reads)."""
        self._forests.pop(conversation_id, None)
        self._metrics.conversations.set(len(self._forests))

    def delete(self, conversation_id: str) -> None:
        self.check_id(conversation_id)
        if not self.exists(conversation_id):
            raise HTTPError(404, f"no conversation {conversation_id!r}", "id", code="conversation_not_found")
        self._forests.pop(conversation_id, None)
        path = self._file(conversation_id)
        if path is not None:
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".journal").unlink(missing_ok=True)

    def _hold(self, conversation_id: str, forest: Any) -> None:
        self._forests[conversation_id] = forest
        self._forests.move_to_end(conversation_id)
        while len(self._forests) > self.max_conversations:
            evicted, _ = self._forests.popitem(last=False)
            if not self.exists(evicted):
                log.warning("conversation %s evicted and lost (no --conversations folder)", evicted)
            self._metrics.evicted.inc()
        self._metrics.conversations.set(len(self._forests))
