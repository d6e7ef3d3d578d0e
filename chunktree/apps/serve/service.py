"""What the endpoints share: the model, the micro-batcher, the limits, the metrics, the conversations."""

from __future__ import annotations

import asyncio
import functools
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
    """What the endpoints share: the default embedder (None until loaded) and its batcher, the
    further models served (``others``: embedders or names, each with a batcher of its own once
    started), limits, metrics, the conversations, the embedding cache (an ``EmbeddingCache``, or None)."""

    def __init__(self, embedder: Any, model: str | None, api_key: str | None, limits: Limits,
                 conversations_dir: Path | None, decider: Any, cache: Any = None, others: Any = ()) -> None:
        self.embedder, self.model, self.api_key, self.limits = embedder, model, api_key, limits
        self.others: list[Any] = list(others)
        self.served: list[tuple[Any, MicroBatcher]] = []  # every model with its batcher, the default first
        self.cache = cache
        self.decider = decider  # every conversation's Forest's: None (the shipped one), a LearnedDecider or "thresholds"
        self.metrics = Metrics()
        self.conversations = Conversations(limits.max_conversations, conversations_dir, self.metrics)
        self.batcher: MicroBatcher | None = None
        self.started = int(time.time())  # the models' "created" time

    async def start(self) -> None:
        """Load (if needed) and warm up the default model and the others, each with a batcher of its own."""
        if self.embedder is None:
            from chunktree.engine.inputs import default_embedder
            from chunktree.models.embedder import Embedder

            if self.model:
                self.embedder = await asyncio.to_thread(Embedder, self.model)
            else:
                self.embedder = await asyncio.to_thread(default_embedder)
        await asyncio.to_thread(self.embedder.warmup)
        embedder = self.embedder
        from chunktree.track.learned import decider_for

        # A decider for other vectors fails at startup, not at the first turn.
        self.decider = decider_for(self.decider, embedder) or "thresholds"

        self.batcher = MicroBatcher(functools.partial(_embed_and_count, embedder), self.limits, self.metrics)
        self.batcher.start()
        self.served = [(embedder, self.batcher)]
        for other in self.others:
            from chunktree.models.embedder import Embedder

            loaded = other if not isinstance(other, str) else await asyncio.to_thread(Embedder, other)
            await asyncio.to_thread(loaded.warmup)
            batcher = MicroBatcher(functools.partial(_embed_and_count, loaded), self.limits, self.metrics)
            batcher.start()
            self.served.append((loaded, batcher))
        log.info("serving %s", ", ".join(e.model_id for e, _ in self.served))

    @property
    def running(self) -> MicroBatcher:
        """The batcher, for the endpoints: requests reach them only once ``start`` has returned."""
        if self.batcher is None:
            raise RuntimeError("the service has not started")
        return self.batcher

    def pick(self, model: str | None) -> tuple[Any, MicroBatcher]:
        """The served model named ``model`` (by name or model id; None: the default) and its
        batcher; ``LookupError`` naming the models served."""
        for embedder, batcher in self.served:
            if model is None or model in (embedder.name, embedder.model_id):
                return embedder, batcher
        names = ", ".join(repr(e.name) for e, _ in self.served)
        raise LookupError(f"the model {model!r:.80} is not served here; this server serves {names}")

    async def stop(self) -> None:
        for _, batcher in self.served[1:]:
            await batcher.stop()
        if self.batcher is not None:
            await self.batcher.stop()
        if self.cache is not None:
            self.cache.close()


def _embed_and_count(embedder: Any, texts: list[str]) -> Any:
    """What a batcher runs: the texts' vectors and token counts."""
    return embedder.embed(texts), embedder.count_tokens(texts)
