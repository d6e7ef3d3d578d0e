"""The HTTP service: OpenAI-compatible embeddings, order and select, with micro-batching and limits.

Endpoints
    POST /v1/embeddings  the OpenAI embeddings API shape (``input``: a string or list of strings;
                         ``encoding_format``: ``float`` or ``base64``), so existing clients work unchanged
    POST /v1/order       ``texts`` (+ ``query``, ``strategy``, ``root``): the fields of ``chunktree order --format json``
    POST /v1/select      ``texts``, ``k`` (+ ``per_cluster``, ``balance``, ``seed``): those of ``chunktree select``
    GET  /health         200 once the model is loaded and warmed up, 503 before
    GET  /metrics        Prometheus text: requests, latency histograms, batch sizes, queue depth

Concurrent embedding requests are coalesced into one ONNX batch: while the model runs a batch,
new requests queue up, and the next model call takes all of them (up to ``max_batch`` texts).
A lone request is never held back (``max_wait_ms`` can add a deliberate wait for company). The
model runs in a worker thread, so the event loop never blocks. The queue is bounded: when
``max_queue`` texts already wait, a request gets 503 with ``Retry-After``. Requests over the size
limits get 413 (body) or 422 (texts, characters), malformed JSON 400, wrong fields 422 — each
with a JSON error naming the limit or field and the value. With an API key configured, requests
without ``Authorization: Bearer <key>`` get 401.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """Request limits and batching settings of the service."""

    max_texts: int = 256          # texts per request
    max_chars: int = 32_000       # characters per text
    max_body: int = 8 * 2**20     # bytes per request body
    max_queue: int = 4096         # texts waiting for the model; beyond: 503
    max_batch: int = 32           # texts per model call
    max_wait_ms: float = 0.0      # extra wait for company; 0: batch whatever queued while the model ran
    batching: bool = True         # off: one model call per request


class HTTPError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers or {}


class Overloaded(Exception):
    pass


class MicroBatcher:
    """Coalesces concurrent embedding requests into model batches, off the event loop.

    ``embed(texts)`` runs in the worker thread and returns (vectors, token counts per text).
    """

    def __init__(self, embed: Any, limits: Limits, metrics: Any) -> None:
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

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            if self._limits.batching and self._limits.max_wait_ms > 0:
                deadline = loop.time() + self._limits.max_wait_ms / 1000
                while sum(len(t) for t, _ in self._pending) < self._limits.max_batch and loop.time() < deadline:
                    self._wake.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), deadline - loop.time())
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


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("chunktree_requests", "HTTP requests", ["path", "status"], registry=self.registry)
        self.latency = Histogram("chunktree_request_seconds", "Request latency", ["path"], registry=self.registry,
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.batch_size = Histogram("chunktree_batch_size", "Texts per model call", registry=self.registry,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))
        self.queue_depth = Gauge("chunktree_queue_depth", "Texts waiting for the model", registry=self.registry)


def _texts(body: dict[str, Any], field: str, limits: Limits, allow_single: bool = False) -> list[str]:
    value = body.get(field)
    if allow_single and isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        kind = "a string or a list of strings" if allow_single else "a list of strings"
        raise HTTPError(422, f"'{field}' must be {kind}; got {type(value).__name__}", field)
    if not value:
        raise HTTPError(422, f"'{field}' must not be empty", field)
    if len(value) > limits.max_texts:
        raise HTTPError(422, f"'{field}' holds {len(value)} texts; the limit is max_texts={limits.max_texts}", field)
    for i, text in enumerate(value):
        if not text:
            raise HTTPError(422, f"'{field}[{i}]' is an empty string", field)
        if len(text) > limits.max_chars:
            raise HTTPError(422, f"'{field}[{i}]' has {len(text)} characters; the limit is "
                                 f"max_chars={limits.max_chars}", field)
    return value


def _optional(body: dict[str, Any], field: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = body.get(field, default)
    is_bool_for_int = isinstance(value, bool) and kind is int  # bool is an int subclass
    if value is not None and (not isinstance(value, kind) or is_bool_for_int):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise HTTPError(422, f"'{field}' must be {names}; got {type(value).__name__}", field)
    return value


def create_app(embedder: Any = None, *, model: str | None = None, api_key: str | None = None,
               limits: Limits = Limits()) -> Any:
    """The ASGI app. ``embedder`` (or an ``Embedder(model)`` built at startup) is warmed up before
    ``/health`` reports ready."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from chunktree.engine.order import STRATEGIES
    from chunktree.engine.order import order as cl_order
    from chunktree.engine.select import select as cl_select

    import orjson

    class FastJSON(JSONResponse):
        """JSON through orjson: float32 arrays serialised directly, several times faster than json."""

        def render(self, content: Any) -> bytes:
            return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)

    metrics = _Metrics()
    state: dict[str, Any] = {"embedder": embedder, "batcher": None}

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        if state["embedder"] is None:
            from chunktree.models.embedder import Embedder

            state["embedder"] = await asyncio.to_thread(Embedder, model or "all-MiniLM-L6-v2")
        await asyncio.to_thread(state["embedder"].warmup)
        emb = state["embedder"]

        def embed_and_count(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
            counts = np.array([len(e.ids) for e in emb.tokenizer.encode_batch(texts)])
            return emb.embed(texts), counts

        batcher = MicroBatcher(embed_and_count, limits, metrics)
        batcher.start()
        state["batcher"] = batcher
        log.info("serving %s", state["embedder"].model_id)
        yield
        await batcher.stop()

    def error(exc: HTTPError) -> JSONResponse:
        body = {"error": {"message": exc.message, "type": "invalid_request_error", "param": exc.param,
                          "code": exc.status}}
        return JSONResponse(body, status_code=exc.status, headers=exc.headers)

    async def read_json(request: Request) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limits.max_body:
            raise HTTPError(413, f"request body has {declared} bytes; the limit is max_body={limits.max_body}")
        raw = await request.body()
        if len(raw) > limits.max_body:
            raise HTTPError(413, f"request body has {len(raw)} bytes; the limit is max_body={limits.max_body}")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HTTPError(400, f"request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise HTTPError(422, f"request body must be a JSON object; got {type(body).__name__}")
        return body

    async def embed(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        try:
            return await state["batcher"].embed(texts)
        except Overloaded:
            raise HTTPError(503, f"the queue is full (max_queue={limits.max_queue} texts); retry shortly",
                            headers={"Retry-After": "1"}) from None

    async def embeddings(request: Request) -> Response:
        body = await read_json(request)
        texts = _texts(body, "input", limits, allow_single=True)
        fmt = _optional(body, "encoding_format", str, "float")
        if fmt not in ("float", "base64"):
            raise HTTPError(422, f"'encoding_format' must be 'float' or 'base64'; got {fmt!r}", "encoding_format")
        _optional(body, "model", str, None)
        dims = _optional(body, "dimensions", int, None)
        emb = state["embedder"]
        if dims is not None and dims != emb.dim:
            raise HTTPError(422, f"'dimensions' must be {emb.dim} for this model; got {dims}", "dimensions")
        vectors, counts = await embed(texts)
        tokens = int(counts.sum())
        data = []
        for i, v in enumerate(vectors):
            value: Any = base64.b64encode(v.astype("<f4").tobytes()).decode() if fmt == "base64" else v
            data.append({"object": "embedding", "index": i, "embedding": value})
        return FastJSON({"object": "list", "data": data, "model": emb.model_id,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def order_endpoint(request: Request) -> Response:
        body = await read_json(request)
        texts = _texts(body, "texts", limits)
        query = _optional(body, "query", str, None)
        strategy = _optional(body, "strategy", str, "bfs")
        if strategy not in STRATEGIES:
            raise HTTPError(422, f"'strategy' must be one of {list(STRATEGIES)}; got {strategy!r}", "strategy")
        root = _optional(body, "root", int, None)
        vectors, _ = await embed(texts + ([query] if query is not None else []))
        x, q = (vectors[:-1], vectors[-1]) if query is not None else (vectors, None)
        try:
            result = await asyncio.to_thread(cl_order, x, q, strategy=strategy, root=root)
        except ValueError as exc:
            raise HTTPError(422, str(exc)) from None
        chunks = [{"position": row["position"], "id": row["chunk"], "text": texts[row["chunk"]],
                   "parent": row["parent"], "parent_similarity": row["parent_similarity"],
                   "query_similarity": row["query_similarity"]} for row in result.explain()]
        weight = None if np.isnan(result.tree_weight) else result.tree_weight
        return JSONResponse({"order": result.order.tolist(), "root": result.root, "strategy": result.strategy,
                             "method": result.method, "tree_weight": weight, "query": query,
                             "n_chunks": len(texts), "model": state["embedder"].model_id, "chunks": chunks})

    async def select_endpoint(request: Request) -> Response:
        body = await read_json(request)
        texts = _texts(body, "texts", limits)
        k = _optional(body, "k", int, None)
        if k is None:
            raise HTTPError(422, "'k' (the number of clusters) is required", "k")
        per_cluster = _optional(body, "per_cluster", int, 1)
        balance = _optional(body, "balance", bool, False)
        seed = _optional(body, "seed", int, 0)
        vectors, _ = await embed(texts)
        try:
            result = await asyncio.to_thread(cl_select, vectors, k, per_cluster=per_cluster, balance=balance,
                                             seed=seed)
        except ValueError as exc:
            raise HTTPError(422, str(exc)) from None
        clusters = [{"cluster": c.id, "size": c.size, "members": list(c.members),
                     "representatives": [{"id": i, "distance": d, "text": texts[i]}
                                         for i, d in zip(c.representatives, c.distances)]}
                    for c in result.clusters]
        return JSONResponse({"k": result.k, "n_chunks": len(texts), "inertia": result.inertia,
                             "model": state["embedder"].model_id, "clusters": clusters})

    async def health(request: Request) -> Response:
        if state["batcher"] is None:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse({"status": "ok", "model": state["embedder"].model_id})

    async def metrics_endpoint(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    handlers = {"/v1/embeddings": embeddings, "/v1/order": order_endpoint, "/v1/select": select_endpoint}

    def route(path: str, handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
                    raise HTTPError(401, "missing or wrong API key (Authorization: Bearer ...)")
                response = await handler(request)
            except HTTPError as exc:
                response = error(exc)
            metrics.requests.labels(path, str(response.status_code)).inc()
            metrics.latency.labels(path).observe(time.perf_counter() - t0)
            return response

        return Route(path, endpoint, methods=["POST"])

    routes = [route(path, handler) for path, handler in handlers.items()]
    routes += [Route("/health", health, methods=["GET"]), Route("/metrics", metrics_endpoint, methods=["GET"])]
    return Starlette(routes=routes, lifespan=lifespan)
