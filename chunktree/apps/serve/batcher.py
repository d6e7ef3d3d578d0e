"""Micro-batching: concurrent embedding requests coalesced into one model call, off the event loop.

While the model runs a batch, new requests queue up, and the next model call takes all of them
(up to ``max_batch`` texts). A lone request is never held back (``max_wait_ms`` can add a
deliberate wait for company).

Load is shed before it costs anything:

- the queue is bounded: past ``max_queue`` waiting texts a request is refused (``Overloaded``);
- admission: once the model's rate (characters per second, measured on every model call) is
  known, a request is refused at once when the work ahead of it (the model call running and the
  queue) and its own would not be done within ``ADMISSION_SHARE`` of ``queue_timeout_s``
  (``Overloaded``, with the estimated time); a request with nothing ahead of it is always admitted;
- a deadline: a request still queued after ``queue_timeout_s`` leaves the queue unrun
  (``QueueTimeout``);
- a request whose caller stops waiting (its task is cancelled: the client hung up) leaves the
  queue unrun.

``BatchedEmbedder`` lets library calls (``order``, ``select``) that run in a worker thread embed
through the same batcher, so the service runs the library's own path.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunktree.apps.serve.http import HTTPError, Limits
from chunktree.progress import Progress

# Weight of the newest model call in the rate estimate.
RATE_WEIGHT = 0.3
# Admission plans for this share of the deadline; the rest is left for reading the request and
# writing the reply, which the model's rate does not count, and for error in the rate (at 1.0 the
# burst of bench_serve.py -k abuse ends past its deadline).
ADMISSION_SHARE = 0.9


class Overloaded(Exception):
    """Refused at once: the queue is full (``code`` "queue_full"), or its work would not be done
    in time ("overloaded")."""

    def __init__(self, message: str, code: str, retry_after: int) -> None:
        super().__init__(message)
        self.code, self.retry_after = code, retry_after


class QueueTimeout(Exception):
    """The request waited in the queue past the deadline and was not run."""


class Abandoned(Exception):
    """The caller of a ``BatchedEmbedder`` stopped waiting."""


@dataclass(eq=False)
class _Job:
    texts: list[str]
    future: asyncio.Future[Any]
    chars: int = field(init=False)

    def __post_init__(self) -> None:
        self.chars = sum(map(len, self.texts))


class MicroBatcher:
    """Coalesces concurrent embedding requests into model batches.

    ``embed(texts)`` is called in the batcher's worker thread and returns (vectors, token counts
    per text).
    """

    def __init__(self, embed: Callable[[list[str]], tuple[np.ndarray, np.ndarray]], limits: Limits,
                 metrics: Any) -> None:
        self._embed, self._limits, self._metrics = embed, limits, metrics
        self._pending: list[_Job] = []
        self._queued = 0  # texts waiting
        self._queued_chars = 0
        self._running_chars = 0
        self.rate: float | None = None  # characters per second of the model, once measured
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chunktree-embed")
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=True)

    def estimated_time(self, chars: int) -> float | None:
        """Seconds until a new request of ``chars`` characters would be done; None before the rate is
        known or when nothing is ahead of it."""
        ahead = self._running_chars + self._queued_chars
        if self.rate is None or not ahead:
            return None
        return (ahead + chars) / self.rate

    async def embed(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Vectors and token counts of ``texts``, from the next model call that takes them."""
        limits = self._limits
        if self._queued + len(texts) > limits.max_queue:
            self._metrics.dropped.labels("queue_full").inc()
            raise Overloaded(f"the queue is full (max_queue={limits.max_queue} texts); retry shortly", "queue_full", 1)
        job = _Job(texts, asyncio.get_running_loop().create_future())
        wait = self.estimated_time(job.chars)
        if wait is not None and wait > ADMISSION_SHARE * limits.queue_timeout_s:
            self._metrics.dropped.labels("admission").inc()
            raise Overloaded(f"the work queued ahead and this request would take about {wait:.1f} s, past "
                             f"{ADMISSION_SHARE:.0%} of the queue deadline "
                             f"(queue_timeout_s={limits.queue_timeout_s:g}); retry later", "overloaded",
                             max(1, math.ceil(wait - ADMISSION_SHARE * limits.queue_timeout_s)))
        self._pending.append(job)
        self._count(job, +1)
        self._wake.set()
        try:
            done, _ = await asyncio.wait({job.future}, timeout=limits.queue_timeout_s)
            if not done and self._leave(job):
                self._metrics.dropped.labels("deadline").inc()
                raise QueueTimeout(f"waited {limits.queue_timeout_s:g} s in the queue (queue_timeout_s) "
                                   "without reaching the model; not run")
            return await job.future  # taken by a model call: it finishes
        except asyncio.CancelledError:
            if self._leave(job):
                self._metrics.dropped.labels("abandoned").inc()
            raise

    def _count(self, job: _Job, sign: int) -> None:
        self._queued += sign * len(job.texts)
        self._queued_chars += sign * job.chars
        self._metrics.queue_depth.set(self._queued)

    def _leave(self, job: _Job) -> bool:
        """Take ``job`` out of the queue if no model call has taken it yet."""
        if job not in self._pending:
            return False
        self._pending.remove(job)
        self._count(job, -1)
        return True

    def _take(self) -> list[_Job]:
        if not self._limits.batching:
            taken = [self._pending.pop(0)]
        else:
            taken, size = [], 0
            while self._pending and (not taken or size + len(self._pending[0].texts) <= self._limits.max_batch):
                taken.append(self._pending.pop(0))
                size += len(taken[-1].texts)
        for job in taken:
            self._count(job, -1)
        return taken

    async def _wait_for_company(self, loop: asyncio.AbstractEventLoop) -> None:
        deadline = loop.time() + self._limits.max_wait_ms / 1000
        while self._queued < self._limits.max_batch and loop.time() < deadline:
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), deadline - loop.time())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            if self._limits.batching and self._limits.max_wait_ms > 0:
                await self._wait_for_company(loop)
            if not self._pending:  # everyone waiting for company left
                continue
            batch = self._take()
            texts = [t for job in batch for t in job.texts]
            chars = self._running_chars = sum(job.chars for job in batch)
            self._metrics.batch_size.observe(len(texts))
            t0 = time.perf_counter()
            try:
                vectors, tokens = await loop.run_in_executor(self._executor, self._embed, texts)
            except Exception as exc:  # handed to every waiting request
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            finally:
                self._running_chars = 0
            measured = chars / max(time.perf_counter() - t0, 1e-6)
            self.rate = measured if self.rate is None else (1 - RATE_WEIGHT) * self.rate + RATE_WEIGHT * measured
            start = 0
            for job in batch:
                if not job.future.done():
                    job.future.set_result((vectors[start:start + len(job.texts)], tokens[start:start + len(job.texts)]))
                start += len(job.texts)


class BatchedEmbedder:
    """The service's embedder as the library sees it: ``embed`` goes through the micro-batcher.

    Call it from a worker thread (``asyncio.to_thread``), never from the event loop. After
    ``cancel()`` (the request was abandoned) its waiting call and every later one raise ``Abandoned``.
    """

    def __init__(self, embedder: Any, batcher: MicroBatcher, loop: asyncio.AbstractEventLoop) -> None:
        self._embedder, self._batcher, self._loop = embedder, batcher, loop
        self.model_id, self.name, self.dim = embedder.model_id, embedder.name, embedder.dim
        self.vectors_id, self.backend, self.precision = embedder.vectors_id, embedder.backend, embedder.precision
        self.choice = embedder.choice
        self.tokenizer = embedder.tokenizer
        self.prompt = embedder.prompt
        self._cancelled = False
        self._future: concurrent.futures.Future[Any] | None = None

    def embed(self, texts: Sequence[str], *, progress: Progress = False) -> np.ndarray:
        if self._cancelled:
            raise Abandoned
        self._future = asyncio.run_coroutine_threadsafe(self._batcher.embed(list(texts)), self._loop)
        try:
            return self._future.result()[0]
        except concurrent.futures.CancelledError:
            raise Abandoned from None

    def cancel(self) -> None:
        self._cancelled = True
        if self._future is not None:
            self._future.cancel()

    def count_tokens(self, texts: Sequence[str]) -> np.ndarray:
        return self._embedder.count_tokens(texts)


def refused(exc: Overloaded | QueueTimeout) -> HTTPError:
    """A refusal by the queue as a 503 that says when to retry."""
    if isinstance(exc, Overloaded):
        return HTTPError(503, str(exc), code=exc.code, headers={"Retry-After": str(exc.retry_after)})
    return HTTPError(503, str(exc), code="queue_timeout", headers={"Retry-After": "1"})
