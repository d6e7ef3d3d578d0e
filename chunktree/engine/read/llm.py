"""A client for the OpenAI-compatible chat-completions protocol (vLLM, llama.cpp's server, Ollama,
hosted APIs), over httpx.

Settings come from arguments or the environment: ``CHUNKTREE_LLM_BASE_URL`` (else
``OPENAI_BASE_URL``), ``CHUNKTREE_LLM_MODEL`` and ``CHUNKTREE_LLM_API_KEY`` (else ``OPENAI_API_KEY``).
429 and 5xx answers and network errors are retried with exponential backoff (honouring
``Retry-After``); any other 4xx, or a reply that is not a chat completion, raises ``LLMError``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from chunktree.checks import ChunktreeError, InvalidValueError

log = logging.getLogger(__name__)


class LLMError(ChunktreeError, RuntimeError):
    """The LLM endpoint failed or answered something that is not a chat completion."""


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
        seconds per request.
    retries
        further attempts after a 429, a 5xx or a network error.
    backoff
        seconds before the first retry, doubling each time (a ``Retry-After`` header wins).
    temperature
        sampling temperature (0 for repeatable runs).
    """

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None, *,
                 timeout: float = 60.0, retries: int = 3, backoff: float = 1.0, temperature: float = 0.0) -> None:
        import httpx

        self.base_url = _setting(base_url, "CHUNKTREE_LLM_BASE_URL", "OPENAI_BASE_URL")
        self.model = _setting(model, "CHUNKTREE_LLM_MODEL")
        if not self.base_url:
            raise InvalidValueError("base_url is required: pass it or set CHUNKTREE_LLM_BASE_URL (or OPENAI_BASE_URL)")
        if not self.model:
            raise InvalidValueError("model is required: pass it or set CHUNKTREE_LLM_MODEL")
        if retries < 0 or timeout <= 0:
            raise InvalidValueError(f"retries must be >= 0 and timeout > 0; got retries={retries}, timeout={timeout}")
        key = _setting(api_key, "CHUNKTREE_LLM_API_KEY", "OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retries, self.backoff, self.temperature = retries, backoff, temperature
        self._url = self.base_url.rstrip("/") + "/chat/completions"
        self._http = httpx.Client(timeout=timeout, headers=headers)

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int | None = None) -> Completion:
        """Send ``messages`` (``role``/``content`` dicts) and return the first choice's text."""
        import httpx

        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        t0 = time.perf_counter()
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2**attempt
            try:
                response = self._http.post(self._url, json=body)
            except httpx.TransportError as exc:  # timeouts, refused connections
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return self._parse(response, time.perf_counter() - t0)
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code != 429 and response.status_code < 500:
                    raise LLMError(f"{self._url} rejected the request ({problem})")
                retry_after = response.headers.get("Retry-After", "")
                if retry_after.replace(".", "", 1).isdigit():
                    wait = float(retry_after)
            if attempt < self.retries:
                log.warning("LLM request failed (%s); retry %d of %d in %.1f s", problem, attempt + 1,
                            self.retries, wait)
                time.sleep(wait)
        raise LLMError(f"{self._url} failed after {self.retries + 1} attempts; last: {problem}")

    def _parse(self, response: Any, seconds: float) -> Completion:
        try:
            data = response.json()
            text = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"{self._url} answered something that is not a chat completion: "
                           f"{response.text[:200]!r}") from exc
        if not isinstance(text, str):
            raise LLMError(f"{self._url} answered a non-text message content: {text!r}")
        usage = data.get("usage") or {}
        return Completion(text, usage.get("prompt_tokens"), usage.get("completion_tokens"), seconds)

    def close(self) -> None:
        self._http.close()
