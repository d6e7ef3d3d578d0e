"""What the endpoints share: the model, the micro-batcher, the limits, the metrics, the conversations."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from chunktree.apps.serve.batcher import MicroBatcher
from chunktree.apps.serve.conversations import Conversations
from chunktree.apps.serve.http import Limits

log = logging.getLogger(__name__)


class Metrics:
    """The Prometheus metrics of one app."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("chunktree_requests", "HTTP requests", ["path", "status"], registry=self.registry)
        self.latency = Histogram("chunktree_request_seconds", "Request latency", ["path"], registry=self.registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.batch_size = Histogram("chunktree_batch_size", "Texts per model call", registry=self.registry,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.queue_depth = Gauge("chunktree_queue_depth", "Texts waiting for the model", registry=self.registry)
        self.conversations = Gauge("chunktree_conversations", "Conversations held in memory", registry=self.registry)
        self.evicted = Counter("chunktree_evicted_conversations", "Conversations evicted from memory",
                               registry=self.registry)
        self.dropped = Counter("chunktree_dropped_requests", "Embedding requests not run, by reason "
                               "(queue_full, admission, deadline, abandoned)", ["reason"], registry=self.registry)


class Service:
    """What the endpoints share: the embedder (None until loaded), the batcher, limits, metrics,
    the conversations, the embedding cache (an ``EmbeddingCache``, or None)."""

    def __init__(self, embedder: Any, model: str | None, api_key: str | None, limits: Limits,
                 conversations_dir: Path | None, decider: Any, cache: Any = None) -> None:
        self.embedder, self.model, self.api_key, self.limits = embedder, model, api_key, limits
        self.cache = cache
        self.decider = decider  # every conversation's Forest's: a LearnedDecider or "thresholds"
        self.metrics = Metrics()
        self.conversations = Conversations(limits.max_conversations, conversations_dir, self.metrics)
        self.batcher: MicroBatcher | None = None
        self.started = int(time.time())  # the models' "created" time

    async def start(self) -> None:
        """Load (if needed) and warm up the model, then start the batcher."""
        if self.embedder is None:
            from chunktree.engine.inputs import default_embedder
            from chunktree.models.embedder import Embedder

            if self.model:
                self.embedder = await asyncio.to_thread(Embedder, self.model)
            else:
                self.embedder = await asyncio.to_thread(default_embedder)
        await asyncio.to_thread(self.embedder.warmup)
        embedder = self.embedder
        if not isinstance(self.decider, str):
            self.decider.check(embedder.dim)  # a decider for other vectors fails at startup, not at the first turn

        def embed(texts: list[str]) -> Any:
            return embedder.embed(texts), embedder.count_tokens(texts)

        self.batcher = MicroBatcher(embed, self.limits, self.metrics)
        self.batcher.start()
        log.info("serving %s", embedder.model_id)

    @property
    def running(self) -> MicroBatcher:
        """The batcher, for the endpoints: requests reach them only once ``start`` has returned."""
        if self.batcher is None:
            raise RuntimeError("the service has not started")
        return self.batcher

    async def stop(self) -> None:
        if self.batcher is not None:
            await self.batcher.stop()
        if self.cache is not None:
            self.cache.close()
