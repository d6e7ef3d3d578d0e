"""chunktree in Haystack pipelines (``pip install "chunktree[haystack]"``; haystack-ai 3.x).

- ``ChunktreeRanker``: a ranker component, ``run(documents, query=None, top_k=None)``: the
  documents in chunktree's reading order for the query (query-free without one), the first
  ``top_k``; in place of ``LostInTheMiddleRanker``.
- ``ChunktreeDocumentEmbedder`` and ``ChunktreeTextEmbedder``: chunktree's local ONNX embedder
  (through its cache) for documents and for the query, like Haystack's other embedder pairs.

A document's own ``embedding`` is used when it has the embedder's dimension, otherwise its
``content`` is embedded. The documents returned are copies (same ``id``, ``meta``, ``score``)
with chunktree's decision under ``meta["chunktree"]`` (``integrations.common``). Every component
serialises with ``to_dict``/``from_dict`` and loads its model in ``warm_up()`` (or on first use).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from chunktree.checks import InvalidTypeError, MissingExtraError, optional_positive_int
from chunktree.engine.order import DEFAULT_STRATEGY
from chunktree.integrations.common import DEFAULT_MODEL_NAME, METADATA_KEY, Ranking

try:
    from haystack import Document, component, default_from_dict, default_to_dict
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError('chunktree.integrations.haystack needs haystack-ai: pip install "chunktree[haystack]"'
                            ) from exc


def _texts(documents: list[Document]) -> list[str]:
    for i, d in enumerate(documents):
        if not isinstance(d, Document):
            raise InvalidTypeError(f"documents[{i}] must be a haystack Document; got {type(d).__name__}")
        if d.content is None:
            raise InvalidTypeError(f"documents[{i}] (id {d.id}) has no text content")
    return [d.content or "" for d in documents]  # None was refused above


class _Serialised:
    """``to_dict``/``from_dict`` of a component whose init parameters are ``self._init``."""

    _init: dict[str, Any]
    _ranking: Ranking

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, **self._init)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        return default_from_dict(cls, data)

    def warm_up(self) -> None:
        """Load the embedding model now instead of on the first run."""
        self._ranking.embedder  # noqa: B018 - loads it


@component
class ChunktreeRanker(_Serialised):
    """Puts documents in chunktree's reading order (``chunktree.order``'s ``strategy`` and
    ``method``) and keeps the first ``top_k`` (default all)."""

    def __init__(self, top_k: int | None = None, strategy: str = DEFAULT_STRATEGY, method: str = "auto",
                 model: str = DEFAULT_MODEL_NAME, cache: str | bool = True, use_embeddings: bool = True,
                 backend: str = "auto", precision: str = "auto") -> None:
        self.top_k = optional_positive_int(top_k, "top_k")
        self._ranking = Ranking(model, cache, strategy, method, use_embeddings, backend=backend, precision=precision)
        self._init = {"top_k": top_k, "strategy": strategy, "method": method, "model": model, "cache": cache,
                      "use_embeddings": use_embeddings, "backend": backend, "precision": precision}

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document], query: str | None = None, top_k: int | None = None
            ) -> dict[str, list[Document]]:
        """``documents`` in reading order for ``query``; the first ``top_k`` (this run's, else the
        component's)."""
        top_k = self.top_k if top_k is None else optional_positive_int(top_k, "top_k")
        decided = self._ranking.order(_texts(documents), [d.embedding for d in documents], query, top_k,
                                      [d.id for d in documents])
        return {"documents": [dataclasses.replace(documents[i], meta={**documents[i].meta, METADATA_KEY: meta})
                              for i, meta in decided]}


@component
class ChunktreeDocumentEmbedder(_Serialised):
    """Sets each document's ``embedding`` (on a copy) from its ``content``."""

    def __init__(self, model: str = DEFAULT_MODEL_NAME, cache: str | bool = True, backend: str = "auto",
                 precision: str = "auto") -> None:
        self._ranking = Ranking(model, cache, backend=backend, precision=precision)
        self._init = {"model": model, "cache": cache, "backend": backend, "precision": precision}

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        vectors = self._ranking.embed(_texts(documents))
        return {"documents": [dataclasses.replace(d, embedding=v.tolist()) for d, v in zip(documents, vectors)]}


@component
class ChunktreeTextEmbedder(_Serialised):
    """The embedding of one text (the query), for an embedding retriever."""

    def __init__(self, model: str = DEFAULT_MODEL_NAME, cache: str | bool = True, backend: str = "auto",
                 precision: str = "auto") -> None:
        self._ranking = Ranking(model, cache, backend=backend, precision=precision)
        self._init = {"model": model, "cache": cache, "backend": backend, "precision": precision}

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, list[float]]:
        if not isinstance(text, str):
            raise InvalidTypeError(f"text must be a str; got {type(text).__name__}")
        return {"embedding": self._ranking.embed([text], "query")[0].tolist()}
