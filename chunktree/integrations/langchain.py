"""chunktree in LangChain pipelines (``pip install "chunktree[langchain]"``; needs only langchain-core).

- ``ChunktreeCompressor``: a ``BaseDocumentCompressor`` that puts retrieved documents in
  chunktree's reading order for the query; use it in ``ContextualCompressionRetriever`` or a
  ``DocumentCompressorPipeline`` in place of ``LongContextReorder``.
- ``ChunktreeTransformer``: a ``BaseDocumentTransformer`` for query-free use: the documents in
  reading order, or with ``k`` the ``k`` representatives of ``k`` topics (``chunktree.select``).
- ``ChunktreeEmbeddings``: ``Embeddings`` from chunktree's local ONNX embedder, through its cache.

The documents returned are copies with chunktree's decision under ``metadata["chunktree"]``
(``integrations.common``); their ``id`` and metadata are kept. Documents carry no embedding in
LangChain, so their texts are embedded (once: the cache keeps the vectors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chunktree.checks import MissingExtraError, optional_positive_int
from chunktree.engine.order import DEFAULT_STRATEGY
from chunktree.integrations.common import DEFAULT_MODEL_NAME, METADATA_KEY, Ranking

try:
    from langchain_core.callbacks import Callbacks
    from langchain_core.documents import BaseDocumentCompressor, BaseDocumentTransformer, Document
    from langchain_core.embeddings import Embeddings
    from pydantic import ConfigDict, PrivateAttr
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError('chunktree.integrations.langchain needs langchain-core: pip install "chunktree[langchain]"'
                            ) from exc


def _copies(documents: Sequence[Document], decided: list[tuple[int, dict[str, Any]]]) -> list[Document]:
    return [Document(page_content=documents[i].page_content, id=documents[i].id,
                     metadata={**documents[i].metadata, METADATA_KEY: meta}) for i, meta in decided]


def _texts(documents: Sequence[Document]) -> list[str]:
    return [d.page_content for d in documents]


class ChunktreeCompressor(BaseDocumentCompressor):
    """Orders retrieved documents for the query (chunktree's reading order); keeps the first
    ``top_k`` in that order (default all). See ``chunktree.order`` for ``strategy`` and ``method``,
    ``integrations.common.Ranking`` for ``model``, ``cache``, ``backend`` and ``precision``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = DEFAULT_MODEL_NAME
    cache: str | bool = True
    strategy: str = DEFAULT_STRATEGY
    method: str = "auto"
    top_k: int | None = None
    backend: str = "auto"
    precision: str = "auto"
    _ranking: Ranking = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        optional_positive_int(self.top_k, "top_k")
        self._ranking = Ranking(self.model, self.cache, self.strategy, self.method, use_embeddings=False,
                                backend=self.backend, precision=self.precision)

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        decided = self._ranking.order(_texts(documents), [None] * len(documents), query, self.top_k,
                                      [d.id for d in documents])
        return _copies(documents, decided)


class ChunktreeTransformer(BaseDocumentTransformer):
    """Query-free: ``transform_documents`` returns the documents in reading order (from the most
    central one), or with ``k`` the ``k`` representatives of as many topics (``per_cluster`` per
    topic, cluster by cluster; all documents when there are at most ``k``)."""

    def __init__(self, k: int | None = None, *, per_cluster: int = 1, seed: int = 0, model: str = DEFAULT_MODEL_NAME,
                 cache: str | bool = True, strategy: str = DEFAULT_STRATEGY, method: str = "auto", backend: str = "auto",
                 precision: str = "auto") -> None:
        self.k = optional_positive_int(k, "k")
        self.per_cluster, self.seed = per_cluster, seed
        self._ranking = Ranking(model, cache, strategy, method, use_embeddings=False, backend=backend, precision=precision)

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        texts, none = _texts(documents), [None] * len(documents)
        if self.k is None:
            decided = self._ranking.order(texts, none, None, None, [d.id for d in documents])
        else:
            decided = self._ranking.select(texts, none, self.k, self.per_cluster, self.seed)
        return _copies(documents, decided)


class ChunktreeEmbeddings(Embeddings):
    """LangChain ``Embeddings`` from chunktree's embedder (local ONNX, unit vectors), cached."""

    def __init__(self, model: str = DEFAULT_MODEL_NAME, cache: str | bool = True, *, backend: str = "auto",
                 precision: str = "auto") -> None:
        self._ranking = Ranking(model, cache, backend=backend, precision=precision)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._ranking.embed(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self._ranking.embed([text], "query")[0].tolist()
