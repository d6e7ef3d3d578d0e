"""A client for the OpenAI-compatible chat-completions protocol (vLLM, llama.cpp's server, Ollama,
hosted APIs), over httpx.

Settings come from arguments or the environment: ``CHUNKTREE_LLM_BASE_URL`` (else
``OPENAI_BASE_URL``), ``CHUNKTREE_LLM_MODEL`` and ``CHUNKTREE_LLM_API_KEY`` (else ``OPENAI_API_KEY``).
429 and 5xx answers, network errors and timeouts are retried with exponential backoff (honouring a
``Retry-After`` of up to ``max_retry_after`` seconds; a longer one fails at once); any other 4xx, or
a reply that is not a chat completion, raises ``LLMError``.

Nothing an endpoint does can hold a run for long: each request, reply included, has a deadline
(``timeout``: a reply dripping a byte at a time is cut there), a reply is read up to
``max_reply_bytes``, and all the requests of a client together may take ``run_timeout`` seconds.
After a request has failed, the next is tried once, without retries; ``max_failed_requests`` failed
in a row raise ``LLMUnavailable``, so an endpoint that never answers costs minutes, not one
timeout per step of a long read.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from chunktree.checks import ChunktreeError, InvalidValueError, integer, json_loads, number

log = logging.getLogger(__name__)


class LLMError(ChunktreeError, RuntimeError):
    """The LLM endpoint failed or answered something that is not a chat completion."""


class LLMUnavailable(LLMError):
    """The endpoint failed ``max_failed_requests`` requests in a row, or the run's time is spent: a
    reader stops instead of failing every step that is left."""


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    seconds: float


def _setting(value: str | None, *names: str) -> str | None:
    if value:
        return value
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return None


class ChatClient:
    """Chat completions from an OpenAI-compatible endpoint.

    Parameters
    ----------
    base_url
        e.g. ``http://127.0.0.1:8080/v1`` (``/chat/completions`` is appended).
    model
        the model name the server expects.
    api_key
        sent as a bearer token when given.
    timeout
        seconds per request, from connecting to the reply's last byte.
    run_timeout
        seconds all the requests of this client may take together (None: no bound); past it every
        request fails at once.
    retries
        further attempts after a 429, a 5xx or a network error.
    backoff
        seconds before the first retry, doubling each time (a ``Retry-After`` header wins).
    max_retry_after
        the longest ``Retry-After`` obeyed; an endpoint that asks for longer fails the request.
    max_reply_bytes
        the largest reply read; a longer one fails the request.
    max_failed_requests
        requests failed in a row (after their retries) before ``LLMUnavailable``.
    temperature
        sampling temperature (0 for repeatable runs).
    """

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None, *,
                 timeout: float = 120.0, run_timeout: float | None = None, retries: int = 3, backoff: float = 1.0,
                 max_retry_after: float = 60.0, max_reply_bytes: int = 8 << 20, max_failed_requests: int = 3,
                 temperature: float = 0.0) -> None:
        import httpx

        self.base_url = _setting(base_url, "CHUNKTREE_LLM_BASE_URL", "OPENAI_BASE_URL")
        self.model = _setting(model, "CHUNKTREE_LLM_MODEL")
        if not self.base_url:
            raise InvalidValueError("base_url is required: pass it or set CHUNKTREE_LLM_BASE_URL (or OPENAI_BASE_URL)")
        if not self.base_url.lower().startswith(("http://", "https://")):
            raise InvalidValueError(f"base_url must be an http:// or https:// URL; got {self.base_url!r:.200}")
        if not self.model:
            raise InvalidValueError("model is required: pass it or set CHUNKTREE_LLM_MODEL")
        if retries < 0 or timeout <= 0:
            raise InvalidValueError(f"retries must be >= 0 and timeout > 0; got retries={retries}, timeout={timeout}")
        if run_timeout is not None:
            number(run_timeout, "run_timeout", 0.0, low_open=True)
        number(max_retry_after, "max_retry_after", 0.0)
        integer(max_reply_bytes, "max_reply_bytes", 1)
        integer(max_failed_requests, "max_failed_requests", 1)
        key = _setting(api_key, "CHUNKTREE_LLM_API_KEY", "OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retries, self.backoff, self.temperature = retries, backoff, temperature
        self.timeout, self.run_timeout = timeout, run_timeout
        self.max_retry_after, self.max_reply_bytes = max_retry_after, max_reply_bytes
        self.max_failed_requests = max_failed_requests
        self._failed = 0  # requests failed in a row
        self._url = self.base_url.rstrip("/") + "/chat/completions"
        self._http = httpx.Client(timeout=timeout, headers=headers)
        self._spent = 0.0  # seconds of requests so far, against run_timeout
        self._since: float | None = None  # when the request under way started

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int | None = None) -> Completion:
        """Send ``messages`` (``role``/``content`` dicts) and return the first choice's text."""
        import httpx

        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        t0 = time.perf_counter()
        self._since = t0
        try:
            attempts = 1 if self._failed else self.retries + 1  # after a failure, no retries until one succeeds
            for attempt in range(attempts):
                wait = self.backoff * 2**attempt
                try:
                    status, headers, reply = self._post(body)
                except (httpx.TransportError, TimeoutError) as exc:  # refused connections, timeouts
                    problem = f"{type(exc).__name__}: {exc}"
                else:
                    if status == 200:
                        self._failed = 0
                        return self._parse(reply, time.perf_counter() - t0)
                    problem = f"HTTP {status}: {reply[:200].decode('utf-8', 'replace')}"
                    if status != 429 and status < 500:
                        raise LLMError(f"{self._url} rejected the request ({problem})")
                    retry_after = headers.get("Retry-After", "")
                    if retry_after.replace(".", "", 1).isdigit():
                        wait = float(retry_after)
                        if wait > self.max_retry_after:
                            raise LLMError(f"{self._url} asks to retry after {wait:g} s, longer than "
                                           f"max_retry_after ({self.max_retry_after:g} s); last: {problem}")
                if attempt < attempts - 1:
                    wait = max(0.0, min(wait, self._left()))
                    log.warning("LLM request failed (%s); retry %d of %d in %.1f s", problem, attempt + 1,
                                self.retries, wait)
                    time.sleep(wait)
            self._failed += 1
            if self._failed >= self.max_failed_requests:
                raise LLMUnavailable(f"{self._url} failed {self._failed} requests in a row; last: {problem}. Stopping: "
                                     "check the endpoint, then run again")
            raise LLMError(f"{self._url} failed after {attempts} attempt{'s' if attempts > 1 else ''}; last: {problem}")
        finally:
            self._spent += time.perf_counter() - t0
            self._since = None

    def _left(self) -> float:
        """Seconds left of ``run_timeout`` (infinite without one), the request under way included."""
        if self.run_timeout is None:
            return float("inf")
        now = 0.0 if self._since is None else time.perf_counter() - self._since
        return self.run_timeout - self._spent - now

    def _post(self, body: dict[str, Any]) -> tuple[int, Any, bytes]:
        """One request: its status, headers and reply, read within ``timeout`` (and what is left of
        ``run_timeout``) and ``max_reply_bytes``."""
        import httpx

        limit = min(self.timeout, self._left())
        if limit <= 0:
            raise LLMUnavailable(f"{self._url}: the run's LLM time (run_timeout, {self.run_timeout:g} s) is spent")
        end = time.monotonic() + limit
        parts, size = [], 0
        with self._http.stream("POST", self._url, json=body, timeout=httpx.Timeout(limit)) as response:
            for part in response.iter_bytes():
                size += len(part)
                if size > self.max_reply_bytes:
                    raise LLMError(f"{self._url} sent a reply longer than max_reply_bytes ({self.max_reply_bytes:,})")
                if time.monotonic() > end:
                    raise TimeoutError(f"the reply took longer than {limit:g} s")
                parts.append(part)
            return response.status_code, response.headers, b"".join(parts)

    def _parse(self, reply: bytes, seconds: float) -> Completion:
        try:
            data = json_loads(reply)
            text = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"{self._url} answered something that is not a chat completion: "
                           f"{reply[:200]!r}") from exc
        if not isinstance(text, str):
            raise LLMError(f"{self._url} answered a non-text message content: {text!r:.200}")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = [usage.get(k) if isinstance(usage.get(k), int) else None for k in ("prompt_tokens", "completion_tokens")]
        return Completion(text, tokens[0], tokens[1], seconds)

    def close(self) -> None:
        self._http.close()
