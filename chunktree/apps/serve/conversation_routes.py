"""The service's conversation endpoints: each conversation a topic forest (``chunktree.track``),
kept in memory and, with ``--conversations DIR``, on disk (``conversations``). A turn or a query
runs in a worker thread, embedding through the micro-batcher and the service's cache.

    POST /v1/conversations              a new topic forest (optional ``id``)
    POST /v1/conversations/{id}/turns   ``user`` (+ ``assistant``, ``budget_tokens``, ``turn``): the
                                        decision and the context for the next turn
    GET  /v1/conversations/{id}         the forest (without vectors) and its indented tree
    GET  /v1/conversations/{id}/context ``?budget_tokens=N`` (+ ``query``: a question about the
                                        conversation that is not a turn of it)
    POST /v1/conversations/{id}/context ``budget_tokens``, ``query`` in a JSON body
    DELETE /v1/conversations/{id}
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from chunktree.apps.serve.batcher import BatchedEmbedder, Overloaded, QueueTimeout, refused
from chunktree.apps.serve.http import HTTPError, optional_field
from chunktree.apps.serve.service import Service
from chunktree.checks import InvalidValueError, unicode, visible

log = logging.getLogger(__name__)


def _forest(service: Service) -> Any:
    from chunktree.track import Forest

    return Forest(service.embedder, decider=service.decider, cache=service.cache)


def _load(service: Service) -> Any:
    from chunktree.track import Forest, ForestFileError

    def load(path: Any) -> Any:
        try:
            return Forest.load(path, service.embedder, decider=service.decider, cache=service.cache)
        except (ForestFileError, InvalidValueError) as exc:  # damage on the server's side: 500, without its paths
            log.error("saved conversation %s cannot be read: %s", path, exc)
            raise HTTPError(500, f"the saved conversation cannot be read: {str(exc).replace(str(path), path.name)}; "
                                 "the server's log names the file") from None

    return load


def _budget(value: Any) -> int | None:
    """``budget_tokens`` from a JSON body or a query string: a positive int (of at most 18 digits in a
    query string, which is more tokens than any conversation holds)."""
    if value is None:
        return None
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit()) or len(value) > 18:
            raise HTTPError(422, f"'budget_tokens' must be a positive int of at most 18 digits; got {value!r:.40}",
                            "budget_tokens")
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise HTTPError(422, f"'budget_tokens' must be a positive int; got {value!r:.80}", "budget_tokens")
    return value


def _check_text(service: Service, value: str | None, name: str) -> None:
    """A text field within ``max_chars`` and of valid Unicode, else 422 naming it."""
    if value is not None and len(value) > service.limits.max_chars:
        raise HTTPError(422, f"'{name}' has {len(value)} characters; the limit is max_chars={service.limits.max_chars}",
                        name)
    try:
        unicode(value or "", f"'{name}'")
    except InvalidValueError as exc:
        raise HTTPError(422, str(exc), name) from None


def _query(service: Service, value: Any) -> str | None:
    """``query``: None, or a non-empty string the service can embed."""
    if value is None:
        return None
    if not isinstance(value, str) or not visible(value):
        raise HTTPError(422, f"'query' must be a string with visible text; got {value!r:.80}", "query")
    _check_text(service, value, "query")
    return value


async def _on_forest(service: Service, work: Any) -> Any:
    """``work(embedder)`` in a worker thread, given the service's embedder through the
    micro-batcher for the forest's calls (the caller holds the conversation's lock); refusals by
    the queue become 503. If the client hangs up, the embedding stops and the thread is let
    finish."""
    loop = asyncio.get_running_loop()
    embedder = BatchedEmbedder(service.embedder, service.running, loop)
    running = loop.run_in_executor(None, work, embedder)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        embedder.cancel()
        with contextlib.suppress(Exception):
            await running
        raise
    except (Overloaded, QueueTimeout) as exc:
        raise refused(exc) from None


async def create_conversation(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    conversation_id = optional_field(body, "id", str, None)
    conversation_id, _ = service.conversations.create(conversation_id, lambda: _forest(service))
    return {"id": conversation_id, "turns": 0}


async def add_turn(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    """Place a turn; the decision and the context for the next turn (within ``budget_tokens``)."""
    conversation_id = params["id"]
    user = optional_field(body, "user", str, None)
    if user is None or not visible(user):
        raise HTTPError(422, "'user' must be a string with visible text (not only spaces, zero-width or control "
                             "characters)", "user")
    assistant = optional_field(body, "assistant", str, None)
    for name, value in (("user", user), ("assistant", assistant)):
        _check_text(service, value, name)
    budget = _budget(body.get("budget_tokens"))
    expected = optional_field(body, "turn", int, None)
    conversations = service.conversations
    async with conversations.locked(conversation_id):
        forest = await conversations.get(conversation_id, _load(service))
        if expected is not None and expected != len(forest.nodes):  # a retry of a turn already kept, or out of order
            held = len(forest.nodes)
            known = f"; turn {expected} is {forest.nodes[expected].user!r:.80}" if 0 <= expected < held else ""
            raise HTTPError(409, f"'turn' is {expected}, but the conversation holds {held} turn{'s' * (held != 1)}, "
                                 f"so this turn would be turn {held}{known}", "turn", code="turn_mismatch")
        if len(forest.nodes) >= service.limits.max_turns:
            raise HTTPError(422, f"the conversation holds max_turns={service.limits.max_turns} turns; start a new "
                                 "one", "user", code="too_many_turns")

        def place(embedder: Any) -> Any:
            decision = forest.add(user, assistant, embedder=embedder)
            try:
                conversations.save(conversation_id, forest, turn=True)
            except OSError as exc:  # not kept: memory goes back to what the folder holds
                conversations.forget(conversation_id)
                raise HTTPError(500, f"the turn could not be saved and was not kept ({exc.strerror or exc})") from None
            return decision, forest.context(budget, embedder=embedder)

        decision, context = await _on_forest(service, place)
    return {"id": conversation_id, "turn": decision.node, "decision": decision.to_dict(), "context": context.to_dict()}


async def get_conversation(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    conversations = service.conversations
    async with conversations.locked(params["id"]):  # never a forest half way through a turn, nor a stale reload
        forest = await conversations.get(params["id"], _load(service))

        def read() -> dict[str, Any]:
            data = {k: v for k, v in forest.to_dict().items() if k != "vectors"}
            return {"id": params["id"], "turns": len(forest.nodes), "forest": data, "tree": forest.show()}

        return await asyncio.get_running_loop().run_in_executor(None, read)


async def _context(service: Service, conversation_id: str, budget: int | None, query: str | None) -> Any:
    """The context for the next turn, or for ``query`` (embedded through the micro-batcher)."""
    conversations = service.conversations
    async with conversations.locked(conversation_id):
        forest = await conversations.get(conversation_id, _load(service))
        context = await _on_forest(service, lambda embedder: forest.context(budget, query=query, embedder=embedder))
    return {"id": conversation_id, "context": context.to_dict()}


async def get_context(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    return await _context(service, params["id"], _budget(params.get("budget_tokens")),
                          _query(service, params.get("query")))


async def post_context(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    return await _context(service, params["id"], _budget(body.get("budget_tokens")),
                          _query(service, body.get("query")))


async def delete_conversation(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    async with service.conversations.locked(params["id"]):
        service.conversations.delete(params["id"])
    return {"id": params["id"], "deleted": True}


# (method, path, handler), as ``routes.ROUTES``.
ROUTES = [
    ("POST", "/v1/conversations", create_conversation),
    ("POST", "/v1/conversations/{id}/turns", add_turn),
    ("GET", "/v1/conversations/{id}", get_conversation),
    ("GET", "/v1/conversations/{id}/context", get_context),
    ("POST", "/v1/conversations/{id}/context", post_context),
    ("DELETE", "/v1/conversations/{id}", delete_conversation),
]
