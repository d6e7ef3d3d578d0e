"""The service's HTTP contract: its limits, its errors in the OpenAI shape, and request bodies
read and checked within those limits."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from chunktree.checks import InvalidTypeError, InvalidValueError, number, positive_int, unicode, visible

# OpenAI's error ``type`` for each status the service answers with.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    409: "invalid_request_error",
    413: "request_too_large",
    422: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


@dataclass(frozen=True)
class Limits:
    """Request limits and batching settings of the service; checked when made.

    Attributes
    ----------
    max_texts
        texts per ``/v1/embeddings`` request (``chunktree serve --max-texts``).
    max_chunks
        texts or vectors per ``/v1/order`` and ``/v1/select`` request (``--max-chunks``).
    max_chars
        characters per text.
    max_body
        bytes per request body (``--max-body-mb``).
    max_queue
        texts waiting for the model; beyond it a request gets 503.
    queue_timeout_s
        the longest a request waits for the model. One that would wait longer by the
        measured model rate is refused at once, one still queued after it leaves unrun; both 503.
    max_batch
        texts per model call.
    max_wait_ms
        extra wait for company; 0 batches whatever queued while the model ran.
    batching
        False makes one model call per request.
    max_conversations
        topic forests held in memory; the least recently used is evicted past it.
    max_turns
        turns per conversation.
    max_header_kb
        KiB per request head (request line and headers); more is answered 431 (``server``).
    header_timeout_s, body_timeout_s
        the longest a client may take to send a request's head (from connecting, or from its
        first byte on a kept-alive connection) and its body (from the end of the head); 408 past it.
    max_connections
        connections open at once; a further one is answered 503 and closed. Lowered to fit under
        the process's descriptor limit.
    shutdown_timeout_s
        on SIGTERM, the longest requests in flight are waited for.
    """

    max_texts: int = 256
    max_chunks: int = 10_000
    max_chars: int = 32_000
    max_body: int = 8 * 2**20
    max_queue: int = 4096
    queue_timeout_s: float = 10.0
    max_batch: int = 32
    max_wait_ms: float = 0.0
    batching: bool = True
    max_conversations: int = 1000
    max_turns: int = 10_000
    max_header_kb: int = 64
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 1000
    shutdown_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "max_wait_ms":
                number(value, "max_wait_ms", 0.0)
            elif f.name.endswith("_timeout_s"):
                number(value, f.name, 0.0, low_open=True)
            elif f.name == "batching":
                if not isinstance(value, bool):
                    raise InvalidTypeError(f"batching must be a bool; got {value!r}")
            else:
                positive_int(value, f.name)


class HTTPError(Exception):
    """An answer other than 200: status, message, the request field at fault, extra headers."""

    def __init__(self, status: int, message: str, param: str | None = None, *, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The OpenAI error shape."""
        return {"error": {"message": self.message, "type": ERROR_TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}


async def read_json(request: Any, limits: Limits) -> dict[str, Any]:
    """The request's JSON object, refused with 413 past ``max_body``, 400 if not JSON, 422 if not
    an object.

    The body is read as it streams and refused as soon as it passes ``max_body``, so a chunked
    upload without a Content-Length is never held past the limit.
    """
    import json

    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_body:
        raise HTTPError(413, f"request body has {declared} bytes; the limit is max_body={limits.max_body} "
                             "(chunktree serve --max-body-mb)", code="body_too_large")
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limits.max_body:
            raise HTTPError(413, f"request body passed max_body={limits.max_body} bytes (chunktree serve --max-body-mb)",
                            code="body_too_large")
        parts.append(part)
    raw = b"".join(parts)
    try:
        body = json.loads(raw)
    except RecursionError:
        raise HTTPError(422, "request body is nested too deeply to be read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise HTTPError(422, f"request body must be a JSON object; got {type(body).__name__}")
    return body


def _count_limit(field: str, n: int, what: str, limit: int, name: str) -> None:
    """413 ``too_many_items`` when ``n`` passes ``limit``, naming the limit and the flag that raises it."""
    if n > limit:
        flag = name.replace("_", "-")
        raise HTTPError(413, f"'{field}' holds {n:,} {what}; the limit is {name}={limit:,} per request (raise it with "
                             f"chunktree serve --{flag} N, or send fewer)", field, code="too_many_items")


def texts_field(body: dict[str, Any], field: str, limits: Limits, allow_single: bool = False,
                limit: str = "max_texts") -> list[str]:
    """``body[field]``: a non-empty list of non-empty strings within the limits (or one string
    with ``allow_single``); ``limit`` names the count limit (413 past it)."""
    value = body.get(field)
    if allow_single and isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        kind = "a string or a list of strings" if allow_single else "a list of strings"
        raise HTTPError(422, f"'{field}' must be {kind}; got {type(value).__name__}", field)
    if not value:
        raise HTTPError(422, f"'{field}' must not be empty", field)
    _count_limit(field, len(value), "texts", getattr(limits, limit), limit)
    for i, text in enumerate(value):
        if not visible(text):
            what = "an empty string" if not text else "only whitespace, zero-width or control characters"
            raise HTTPError(422, f"'{field}[{i}]' is {what}", field)
        if len(text) > limits.max_chars:
            raise HTTPError(422, f"'{field}[{i}]' has {len(text)} characters; the limit is "
                                 f"max_chars={limits.max_chars}", field)
        try:
            unicode(text, f"'{field}[{i}]'")
        except InvalidValueError as exc:
            raise HTTPError(422, str(exc), field) from None
    return value


def token_ids_field(body: dict[str, Any], field: str, limits: Limits) -> list[list[int]] | None:
    """``body[field]`` as token ids, as the OpenAI API takes them: a list of ints (one text) or a
    list of lists of ints; None when it holds text. The count limit is ``max_texts``, and a text
    of ids at most ``max_chars`` ids long."""
    value = body.get(field)
    if not isinstance(value, list) or not value or isinstance(value[0], str):
        return None
    rows = [value] if all(isinstance(t, int) and not isinstance(t, bool) for t in value) else value
    for i, row in enumerate(rows):
        if not isinstance(row, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in row):
            raise HTTPError(422, f"'{field}' must be a string, a list of strings, a list of token ids or a list of "
                                 f"lists of token ids; '{field}[{i}]' is not", field)
        if len(row) > limits.max_chars:
            raise HTTPError(422, f"'{field}[{i}]' has {len(row)} token ids; the limit is max_chars={limits.max_chars}",
                            field)
    _count_limit(field, len(rows), "texts", limits.max_texts, "max_texts")
    return rows


def vectors_field(body: dict[str, Any], field: str, limits: Limits) -> np.ndarray:
    """``body[field]``: a non-empty list of equally long, non-empty lists of finite numbers, at most
    ``max_chunks`` of them, as float32 (n, d)."""
    value = body.get(field)
    if not isinstance(value, list) or not value or not all(isinstance(row, list) for row in value):
        raise HTTPError(422, f"'{field}' must be a non-empty list of lists of numbers (one vector per chunk); got "
                             f"{type(value).__name__ if not isinstance(value, list) or not value else 'a list of other things'}",
                        field)
    _count_limit(field, len(value), "vectors", limits.max_chunks, "max_chunks")
    # Whole-body checks at C speed; the loops below only find
    # what to name when one fails.
    d = len(value[0])
    if d == 0 or set(map(len, value)) != {d}:
        i = next(i for i, row in enumerate(value) if len(row) != d or d == 0)
        raise HTTPError(422, f"'{field}[{i}]' has {len(value[i])} numbers; every vector must have the same "
                             f"non-zero length ({d} in '{field}[0]')", field)
    if not set(map(type, itertools.chain.from_iterable(value))) <= {int, float}:  # bool and str are not numbers
        i, j, v = next((i, j, v) for i, row in enumerate(value) for j, v in enumerate(row) if type(v) not in (int, float))
        raise HTTPError(422, f"'{field}[{i}][{j}]' must be a number; got {type(v).__name__}", field)
    try:
        x = np.array(value, dtype=np.float64)
    except OverflowError:  # an integer past float64's range
        i, j, v = next((i, j, v) for i, row in enumerate(value) for j, v in enumerate(row)
                       if isinstance(v, int) and abs(v) > float(np.finfo(np.float32).max))
        raise HTTPError(422, f"'{field}[{i}][{j}]' must be a finite float32 number; got an integer of "
                             f"{len(str(abs(v)))} digits", field) from None
    zero = np.flatnonzero(~x.any(axis=1))
    if zero.size:
        raise HTTPError(422, f"'{field}[{zero[0]}]' is all zeros: a vector needs a direction for cosine similarity "
                             f"({zero.size} such row(s))", field)
    bad = ~np.isfinite(x) | (np.abs(x) > np.finfo(np.float32).max)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise HTTPError(422, f"'{field}[{i}][{j}]' must be a finite float32 number; got {x[i, j]}", field)
    return x.astype(np.float32)


def optional_field(body: dict[str, Any], field: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """``body[field]`` if present and of ``kind`` (a bool is not an int), else ``default``."""
    value = body.get(field, default)
    is_bool_for_int = isinstance(value, bool) and kind is int
    if value is not None and (not isinstance(value, kind) or is_bool_for_int):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise HTTPError(422, f"'{field}' must be {names}; got {type(value).__name__}", field)
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
        raise HTTPError(422, f"'{field}' is out of range: an integer of {len(str(abs(value)))} digits; the API takes "
                             "64-bit integers", field)
    return value
