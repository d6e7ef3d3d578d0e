"""The service's app factory: the model, the micro-batcher, auth, metrics and error handling
around the endpoints of ``routes`` and ``conversation_routes``.

Every request is counted and timed (``/metrics``). With an API key configured, a request to an
endpoint without ``Authorization: Bearer <key>`` gets 401, and so does ``/metrics`` unless
``metrics_public``.
Errors come back in the OpenAI shape with the type of their status (``http.ERROR_TYPES``), for
an unknown path or method too; an unexpected exception is logged with its traceback and answered
500 ``server_error``.

Once its body is read, a request is watched for its client hanging up: if it does, the handler is
cancelled, so queued work for it leaves the queue unrun (counted as status 499 in ``/metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import chunktree.apps.serve.conversation_routes as conversation_routes
import chunktree.apps.serve.routes as routes
from chunktree.apps.serve.http import HTTPError, Limits, read_json
from chunktree.apps.serve.service import Service
from chunktree.checks import InvalidValueError, require
from chunktree.files import FolderLock

log = logging.getLogger(__name__)


async def _hung_up(request: Any) -> None:
    """Returns when the client has gone. Call it only once the body is read: it reads the
    connection's next message, which after the body is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(embedder: Any = None, *, model: str | None = None, api_key: str | None = None,
               limits: Limits | None = None, metrics_public: bool = False,
               conversations_dir: str | os.PathLike[str] | None = None, decider: Any = None,
               cache: str | os.PathLike[str] | None = None, others: Any = ()) -> Any:
    """The ASGI app. ``embedder`` (or an ``Embedder(model)``, or the default model, loaded at startup)
    is warmed up before ``/health`` reports ready. ``metrics_public`` leaves ``/metrics`` open when
    an ``api_key`` is required. ``conversations_dir`` keeps every conversation's forest on disk (see
    ``conversations``); the app holds the folder's lock (``files.FolderLock``) from here to its
    shutdown, so a second app or server on the folder is refused. ``decider`` places every
    conversation's turns, as ``Forest`` takes it (None: the shipped learned decider;
    ``"thresholds"``; a ``LearnedDecider`` or the path of a decider file, read here so that a bad
    one fails before the server starts). ``cache``: an SQLite embedding cache file
    (``EmbeddingCache``) that every endpoint embeds through; None: no cache. ``others``: further
    models to serve (embedders, or names loaded at startup), chosen by a request's ``model``; the
    first model is the default and the conversations'."""
    require("starlette", "serve", "chunktree serve")
    orjson = require("orjson", "serve", "chunktree serve")
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    folder, lock = None, None
    if conversations_dir is not None:
        folder = Path(conversations_dir)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidValueError(f"conversations_dir {folder}: cannot create it or write in it "
                                    f"({exc.strerror or exc})") from None
        # One server per folder: a second one is refused here, before it acknowledges a turn that the
        # first would not see (its lock file is also the check that the folder can be written).
        lock = FolderLock(folder, "chunktree serve")
    from chunktree.engine.cache import EmbeddingCache
    from chunktree.track.learned import load_decider

    chosen = None if decider is None else load_decider(decider) or "thresholds"  # None: the shipped one, if it fits
    service = Service(embedder, model, api_key, limits or Limits(), folder, chosen,
                      None if cache is None else EmbeddingCache(Path(cache)), others)

    class FastJSON(JSONResponse):
        """JSON through orjson: float32 arrays serialised directly, several times faster than json."""

        def render(self, content: Any) -> bytes:
            return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        try:
            await service.start()
            yield
            await service.stop()
        finally:
            if lock is not None:
                lock.release()

    def authorise(request: Request) -> None:
        if service.api_key is not None and request.headers.get("authorization") != f"Bearer {service.api_key}":
            raise HTTPError(401, "missing or wrong API key (Authorization: Bearer ...)", code="invalid_api_key")

    async def unless_hung_up(request: Request, work: Any) -> tuple[bool, Any]:
        """(True, ``await work``), or (False, None) if the client hangs up first: ``work`` is cancelled."""
        task, gone = asyncio.ensure_future(work), asyncio.ensure_future(_hung_up(request))
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            gone.cancel()
        if task.done():
            return True, task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False, None

    def route(method: str, path: str, handler: Any) -> Route:
        async def endpoint(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                authorise(request)
                body = await read_json(request, service.limits) if method == "POST" else {}
                params = {**request.query_params, **request.path_params}
                answered, result = await unless_hung_up(request, handler(service, body, params))
                response: Response = FastJSON(result) if answered else Response(status_code=499)
            except HTTPError as exc:
                response = JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)
            except InvalidValueError as exc:  # the library refused an input the checks here let through
                response = JSONResponse(HTTPError(422, str(exc)).body(), status_code=422)
            except ClientDisconnect:  # gone while its body was read
                response = Response(status_code=499)
            except Exception:  # a bug: logged, answered 500 in the API's shape
                log.exception("%s failed", path)
                response = JSONResponse(HTTPError(500, "internal error; see the server log").body(), status_code=500)
            service.metrics.requests.labels(path, str(response.status_code)).inc()
            service.metrics.latency.labels(path).observe(time.perf_counter() - t0)
            return response

        return Route(path, endpoint, methods=[method])

    async def health(request: Request) -> Response:
        if service.batcher is None:
            return JSONResponse({"status": "loading"}, status_code=503)
        e = service.embedder
        return JSONResponse({"status": "ok", "model": e.model_id, "backend": e.backend, "precision": e.precision})

    async def metrics(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if not metrics_public:
            try:
                authorise(request)
            except HTTPError as exc:
                return JSONResponse(exc.body(), status_code=exc.status)
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def http_exception(request: Request, exc: Exception) -> Response:
        """Starlette's own answers (no such path, a method the path does not take) in the API's shape."""
        status = getattr(exc, "status_code", 500)
        what = "no such endpoint" if status == 404 else "this endpoint does not take that method"
        error = HTTPError(status, f"{request.method} {request.url.path}: {what}; see the HTTP API in the docs")
        return JSONResponse(error.body(), status_code=status, headers=getattr(exc, "headers", None))

    endpoints = [route(method, path, handler) for method, path, handler in routes.ROUTES + conversation_routes.ROUTES]
    endpoints += [Route("/health", health, methods=["GET"]), Route("/metrics", metrics, methods=["GET"])]
    return Starlette(routes=endpoints, lifespan=lifespan, exception_handlers={404: http_exception,
                                                                               405: http_exception})
