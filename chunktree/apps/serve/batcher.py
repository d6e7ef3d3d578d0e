"""Micro-batching: concurrent embedding requests coalesced into one model call, off the event loop.

While the model runs a batch, new requests queue up, and the next model call takes all of them
(up to ``max_batch`` texts). A lone request is never held back (``max_wait_ms`` can add a
deliberate wait for company). The queue is bounded: past ``max_queue`` waiting texts a request is
refused with ``Overloaded``.

``BatchedEmbedder`` lets library calls (``order``, ``select``) that run in a worker thread embed
through the same batcher, so the service runs the library's own path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from chunktree.apps.serve.http import Limits


class Overloaded(Exception):
    """The queue is full."""


class MicroBatcher:
    """Coalesces concurrent embedding requests into model batches.

    ``embed(texts)`` is called in the batcher's worker thread and returns (vectors, token counts
    per text).
    """

    def __init__(self, embed: Callable[[list[str]], tuple[np.ndarray, np.ndarray]], limits: Limits,
                 metrics: Any) -> None:
        self._embed, self._limits, self._metrics = embed, limits, metrics
        self._pending: list[tuple[list[str], asyncio.Future[Any]]] = []
        self._queued = 0
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

    async def embed(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Vectors and token counts of ``texts``, from the next model call that takes them."""
        if self._queued + len(texts) > self._limits.max_queue:
            raise Overloaded
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((texts, future))
        self._queued += len(texts)
        self._metrics.queue_depth.set(self._queued)
        self._wake.set()
        return await future

    def _take(self) -> list[tuple[list[str], asyncio.Future[Any]]]:
        if not self._limits.batching:
            return [self._pending.pop(0)]
        taken, size = [], 0
        while self._pending and (not taken or size + len(self._pending[0][0]) <= self._limits.max_batch):
            item = self._pending.pop(0)
            taken.append(item)
            size += len(item[0])
        return taken

    async def _wait_for_company(self, loop: asyncio.AbstractEventLoop) -> None:
        deadline = loop.time() + self._limits.max_wait_ms / 1000
        while sum(len(t) for t, _ in self._pending) < self._limits.max_batch and loop.time() < deadline:
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
            batch = self._take()
            texts = [t for item, _ in batch for t in item]
            self._queued -= len(texts)
            self._metrics.queue_depth.set(self._queued)
            self._metrics.batch_size.observe(len(texts))
            try:
                vectors, tokens = await loop.run_in_executor(self._executor, self._embed, texts)
            except Exception as exc:  # noqa: BLE001 - handed to every waiting request
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            start = 0
            for item, future in batch:
                if not future.done():
                    future.set_result((vectors[start:start + len(item)], tokens[start:start + len(item)]))
                start += len(item)


class BatchedEmbedder:
    """The service's embedder as the library sees it: ``embed`` goes through the micro-batcher.

    Call it from a worker thread (``asyncio.to_thread``), never from the event loop.
    """

    def __init__(self, embedder: Any, batcher: MicroBatcher, loop: asyncio.AbstractEventLoop) -> None:
        self._embedder, self._batcher, self._loop = embedder, batcher, loop
        self.model_id, self.name, self.dim = embedder.model_id, embedder.name, embedder.dim
        self.tokenizer = embedder.tokenizer

    def embed(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        future = asyncio.run_coroutine_threadsafe(self._batcher.embed(list(texts)), self._loop)
        return future.result()[0]

    def count_tokens(self, texts: Sequence[str]) -> np.ndarray:
        return self._embedder.count_tokens(texts)
