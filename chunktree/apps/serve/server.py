"""The HTTP server the service runs on: uvicorn, with the connection limits a public service needs.

uvicorn bounds neither a request's head nor how slowly a client may send it, so one client could
hold the event loop on a 150 MB header or keep hundreds of half-sent requests open. Each connection
here (``GuardedProtocol``, uvicorn's httptools protocol with these checks added) is held to:

- a request head of at most ``max_header_kb`` (431 past it);
- a deadline for the head, from its first byte (``header_timeout_s``), and one for the body, from
  the end of the head (``body_timeout_s``): a client that sends slower is answered 408 and closed;
- at most ``max_connections`` open connections (a further one is answered 503 and closed at once,
  before it holds a descriptor for long); the default leaves room under the process's descriptor
  limit.

On SIGTERM or SIGINT the server stops accepting, lets requests in flight finish for up to
``shutdown_timeout_s`` seconds, then closes what is left and exits.
"""

from __future__ import annotations

import json
import resource
from typing import Any

from chunktree.apps.serve.http import HTTPError, Limits

# Descriptors kept free for the model, the cache, conversation files and logs.
SPARE_DESCRIPTORS = 64


def max_connections(limits: Limits) -> int:
    """``limits.max_connections``, lowered to fit under the process's descriptor limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = limits.max_connections if soft == resource.RLIM_INFINITY else soft - SPARE_DESCRIPTORS
    return max(1, min(limits.max_connections, room))


def protocol(limits: Limits) -> type:
    """uvicorn's httptools protocol with ``limits``' head size, deadlines and connection count."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    most = max_connections(limits)
    max_head = limits.max_header_kb * 1024

    class GuardedProtocol(HttpToolsProtocol):
        """See the module's docstring."""

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._head_bytes = 0
            self._in_body = False
            self._deadline: Any = None
            if len(self.connections) > most:
                self._refuse(503, "too many open connections; try again shortly")
            else:  # a connection that sends nothing is held no longer than a slow head
                self._arm(limits.header_timeout_s, "the request head")

        def data_received(self, data: bytes) -> None:
            if not self._in_body:
                if self._deadline is None:
                    self._arm(limits.header_timeout_s, "the request head")
                self._head_bytes += len(data)
            super().data_received(data)
            if not self._in_body and self._head_bytes > max_head and not self.transport.is_closing():
                self._refuse(431, f"the request head is longer than {limits.max_header_kb} KiB")

        def on_message_begin(self) -> None:
            self._parsed_head = 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._parsed_head += len(url)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._parsed_head += len(name) + len(value) + 4  # ": " and the line's end
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            if self._parsed_head > max_head:  # a head that came whole in one read, too long all the same
                self._refuse(431, f"the request head is longer than {limits.max_header_kb} KiB")
                return
            self._in_body = True
            self._arm(limits.body_timeout_s, "the request body")
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if not self.transport.is_closing():
                super().on_body(body)

        def on_message_complete(self) -> None:
            self._disarm()
            self._in_body, self._head_bytes = False, 0
            if not self.transport.is_closing():
                super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self, seconds: float, what: str) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expired, what, seconds)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self, what: str, seconds: float) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self._refuse(408, f"{what} did not arrive within {seconds:g} s")

        def _refuse(self, status: int, message: str) -> None:
            """Answer ``status`` with ``message`` and close, whatever the request's state."""
            reason = {408: "Request Timeout", 431: "Request Header Fields Too Large",
                      503: "Service Unavailable"}[status]
            body = json.dumps(HTTPError(status, message).body()).encode()
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                                 b"connection: close\r\n\r\n%s" % (status, reason.encode(), len(body), body))
            self.transport.close()
            if self.cycle is not None and not self.cycle.response_complete:
                self.cycle.disconnected = True  # the app, if it runs, sees the client gone
                self.cycle.message_event.set()

    return GuardedProtocol


def config(app: Any, limits: Limits, host: str = "127.0.0.1", port: int = 8000, **kwargs: Any) -> Any:
    """The ``uvicorn.Config`` that serves ``app`` under ``limits`` (extra ``kwargs`` to uvicorn)."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, http=protocol(limits),
                          timeout_graceful_shutdown=max(1, round(limits.shutdown_timeout_s)), **kwargs)
