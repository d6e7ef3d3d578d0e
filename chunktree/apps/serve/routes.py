"""The service's endpoints. Each checks its request's JSON body, calls the library, and returns the
result's own ``to_dict()``: the same JSON that ``chunktree order|select --format json`` prints.

    GET  /v1/models      the served model, in the OpenAI list shape (``OpenAI().models.list()``)
    GET  /v1/models/{id} the served model by its name or id; any other is 404 ``model_not_found``
    POST /v1/embeddings  the OpenAI embeddings API shape (``input``: a string or list of strings;
                         ``encoding_format``: ``float`` or ``base64``; a ``model`` other than the
                         served one's name or id is 404 ``model_not_found``)
    POST /v1/order       ``texts`` or ``vectors`` (+ ``query``, ``strategy``, ``root``)
    POST /v1/select      ``texts`` or ``vectors``, ``k`` (+ ``per_cluster``, ``balance``, ``coverage``, ``seed``)

Texts are embedded through the service's embedding cache (``chunktree serve --cache``): a text
embedded once, by any endpoint or by the CLI with the same cache and model, is not embedded again.
                                        decision and the context for the next turn
                                        conversation that is not a turn of it)
    GET  /health         200 once the model is loaded and warmed up, 503 before
    GET  /metrics        Prometheus text
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import numpy as np

from chunktree.apps.serve.batcher import BatchedEmbedder, Overloaded, QueueTimeout, refused
from chunktree.apps.serve.http import HTTPError, optional_field, texts_field, token_ids_field, vectors_field
from chunktree.apps.serve.service import Service
from chunktree.checks import ChunktreeError, normalised
from chunktree.engine.order import DEFAULT_STRATEGY, order
from chunktree.engine.select import select

log = logging.getLogger(__name__)


async def _run_library(service: Service, function: Any, *args: Any, model: str | None = None, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` in a worker thread, embedding through the micro-batcher of the
    served ``model`` (None: the default); its input errors become 422, refusals by the queue 503. If
    the request is abandoned, the thread's next embedding stops it."""
    loop = asyncio.get_running_loop()
    served, batcher = _pick(service, model, "model")
    embedder = BatchedEmbedder(served, batcher, loop)
    try:
        return await asyncio.to_thread(function, *args, embedder=embedder, cache=service.cache, **kwargs)
    except asyncio.CancelledError:
        embedder.cancel()
        raise
    except ChunktreeError as exc:
        raise HTTPError(422, str(exc)) from None
    except (Overloaded, QueueTimeout) as exc:
        raise refused(exc) from None


def _model_card(service: Service, e: Any) -> dict[str, Any]:
    """A served model in the OpenAI shape (``created`` is when this server started), with what it
    runs on and what it takes under ``chunktree``."""
    return {"id": e.model_id, "object": "model", "created": service.started, "owned_by": "chunktree",
            "chunktree": {"name": e.name, "backend": e.backend, "precision": e.precision, "choice": e.choice.reason,
                          "dim": e.dim, "window": e.window, "pooling": e.pooling, "prompts": e.prompts,
                          "matryoshka": e.matryoshka, "default": e is service.embedder}}


def _pick(service: Service, model: str | None, param: str | None) -> tuple[Any, Any]:
    """The served model named ``model`` (name or model id; None: the default) and its batcher, or
    404 ``model_not_found`` naming the models served."""
    try:
        return service.pick(model)
    except LookupError as exc:
        raise HTTPError(404, str(exc), param, code="model_not_found") from None


async def list_models(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    return {"object": "list", "data": [_model_card(service, e) for e, _ in service.served]}


async def get_model(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    return _model_card(service, _pick(service, params["id"], None)[0])


async def embeddings(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    limits = service.limits
    fmt = optional_field(body, "encoding_format", str, "float")
    if fmt not in ("float", "base64"):
        raise HTTPError(422, f"'encoding_format' must be 'float' or 'base64'; got {fmt!r:.80}", "encoding_format")
    e, batcher = _pick(service, optional_field(body, "model", str, None), "model")
    dims = optional_field(body, "dimensions", int, None)
    if dims is not None and dims != e.dim and not (e.matryoshka and 1 <= dims < e.dim):
        allowed = f"from 1 to {e.dim} (it is trained for shorter vectors)" if e.matryoshka else (
            f"{e.dim}: its model card does not declare Matryoshka training, so its vectors cannot be shortened")
        raise HTTPError(400, f"'dimensions' must be {allowed} for {e.name!r}; got {dims}", "dimensions")
    prefix = _prompt(e, optional_field(body, "prompt_name", str, None))
    ids = token_ids_field(body, "input", limits)
    if ids is not None and prefix:
        raise HTTPError(422, "'prompt_name' applies to text input; put the prompt's tokens before the ids yourself",
                        "prompt_name")
    if ids is not None:  # the model's own token ids, as the OpenAI API allows; not cached
        try:
            vectors = await asyncio.to_thread(e.embed_token_ids, ids)
        except ChunktreeError as exc:
            raise HTTPError(422, str(exc), "input") from None
        tokens = sum(map(len, ids))
    else:
        texts = [prefix + t for t in texts_field(body, "input", limits, allow_single=True)]
        vectors, tokens = await _embed_cached(service, texts, e, batcher)
    if dims is not None and dims < e.dim:  # Matryoshka: the leading dimensions, normalised again
        vectors = normalised(vectors[:, :dims])
    data = []
    for i, v in enumerate(vectors):
        value: Any = base64.b64encode(v.astype("<f4").tobytes()).decode() if fmt == "base64" else v
        data.append({"object": "embedding", "index": i, "embedding": value})
    return {"object": "list", "data": data, "model": e.model_id,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def _prompt(e: Any, name: str | None) -> str:
    """The text put before each input for ``prompt_name`` (sentence-transformers' name, as TEI
    takes it): a prompt the model declares, or "query" / "document", which are nothing for a
    model without prompts."""
    if name is None:
        return ""
    if name not in e.prompts and name not in ("query", "document"):
        names = sorted({"query", "document", *e.prompts})
        raise HTTPError(400, f"'prompt_name' must be one of {names} for {e.name!r}; got {name!r:.80}", "prompt_name")
    return str(e.prompt(name))


async def _embed_cached(service: Service, texts: list[str], e: Any, batcher: Any) -> tuple[Any, int]:
    """The vectors of ``texts`` by model ``e`` (the cache's where it has them, the rest embedded
    through its ``batcher`` and stored) and the texts' token count."""
    cache = service.cache
    if cache is None:
        found = np.zeros(len(texts), dtype=bool)
        vectors = np.zeros((len(texts), e.dim), dtype=np.float32)
    else:
        vectors, found = await asyncio.to_thread(cache.get, e.vectors_id, texts, e.dim)
    missing = np.flatnonzero(~found)
    tokens = 0
    if missing.size:
        todo = list(dict.fromkeys(texts[i] for i in missing))  # a repeated text is embedded once
        try:
            new, counts = await batcher.embed(todo)
        except (Overloaded, QueueTimeout) as exc:
            raise refused(exc) from None
        row = {text: j for j, text in enumerate(todo)}
        rows = [row[texts[i]] for i in missing]
        vectors[missing] = new[rows]
        tokens += int(counts[rows].sum())  # every text as given counts its tokens, repeats too
        if cache is not None:
            await asyncio.to_thread(cache.put, e.vectors_id, todo, new)
    if found.any():
        tokens += int(e.count_tokens([t for t, hit in zip(texts, found) if hit]).sum())
    return vectors, tokens


def _chunks_field(service: Service, body: dict[str, Any]) -> Any:
    """``texts`` (a list of strings) or ``vectors`` (a list of equally long lists of numbers): one of the two."""
    given = [name for name in ("texts", "vectors") if body.get(name) is not None]
    if len(given) != 1:
        raise HTTPError(422, "give 'texts' (a list of strings) or 'vectors' (a list of equally long lists of "
                             f"numbers), one of the two; got {' and '.join(map(repr, given)) or 'neither'}",
                        "texts")
    if given[0] == "texts":
        return texts_field(body, "texts", service.limits, limit="max_chunks")
    return vectors_field(body, "vectors", service.limits)


async def order_endpoint(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    chunks = _chunks_field(service, body)
    query = optional_field(body, "query", str, None)
    if query is not None and len(query) > service.limits.max_chars:
        raise HTTPError(422, f"'query' has {len(query):,} characters; the limit is max_chars="
                             f"{service.limits.max_chars:,}", "query")
    strategy = optional_field(body, "strategy", str, DEFAULT_STRATEGY)
    root = optional_field(body, "root", int, None)
    model = optional_field(body, "model", str, None)
    e = _pick(service, model, "model")[0]
    if query is not None and isinstance(chunks, np.ndarray) and chunks.shape[1] != e.dim:
        raise HTTPError(422, f"'vectors' have {chunks.shape[1]} dims, but 'query' is embedded by the model "
                             f"{e.name!r} in {e.dim}: send that model's vectors (e.g. from /v1/embeddings), or no "
                             "query", "vectors")
    result = await _run_library(service, order, chunks, query, strategy=strategy, root=root, model=model)
    return result.to_dict()


async def select_endpoint(service: Service, body: dict[str, Any], params: dict[str, str]) -> Any:
    chunks = _chunks_field(service, body)
    k = optional_field(body, "k", int, None)
    if k is None:
        raise HTTPError(422, "'k' (the number of clusters) is required", "k")
    per_cluster = optional_field(body, "per_cluster", int, 1)
    balance = optional_field(body, "balance", bool, False)
    coverage = optional_field(body, "coverage", bool, False)
    seed = optional_field(body, "seed", int, 0)
    result = await _run_library(service, select, chunks, k, per_cluster=per_cluster, balance=balance,
                                 coverage=coverage, seed=seed, model=optional_field(body, "model", str, None))
    return result.to_dict()


# (method, path, handler); POST handlers get the checked JSON body, all get the path and query parameters.
ROUTES = [
    ("GET", "/v1/models", list_models),
    ("GET", "/v1/models/{id:path}", get_model),
    ("POST", "/v1/embeddings", embeddings),
    ("POST", "/v1/order", order_endpoint),
    ("POST", "/v1/select", select_endpoint),
]
