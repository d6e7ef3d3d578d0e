"""chunktree in LlamaIndex pipelines (``pip install "chunktree[llama-index]"``; needs llama-index-core).

- ``ChunktreePostprocessor``: a ``BaseNodePostprocessor`` that puts retrieved nodes in
  chunktree's reading order for the ``QueryBundle``'s question (``node_postprocessors=[...]`` of a
  query engine, in place of ``LongContextReorder``); keeps the first ``top_k``.
- ``ChunktreeSelector``: a ``BaseNodePostprocessor`` that keeps ``k`` representatives of as many
  topics, without a query.
- ``ChunktreeEmbedding``: a ``BaseEmbedding`` from chunktree's local ONNX embedder, through its cache.

A node's own ``embedding`` is used when it has the embedder's dimension, otherwise its text
(``MetadataMode.NONE``) is embedded. The nodes returned are copies with chunktree's decision
under ``metadata["chunktree"]`` (``integrations.common``), excluded from what the LLM and the
embedder see; their ids, scores and metadata are kept.
"""

from __future__ import annotations

from typing import Any

from chunktree.checks import MissingExtraError, optional_positive_int, positive_int
from chunktree.engine.order import DEFAULT_STRATEGY
from chunktree.integrations.common import DEFAULT_MODEL_NAME, METADATA_KEY, Ranking

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
    from pydantic import PrivateAttr
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError('chunktree.integrations.llama_index needs llama-index-core: '
                            'pip install "chunktree[llama-index]"') from exc


def _inputs(nodes: list[NodeWithScore]) -> tuple[list[str], list[Any], list[str]]:
    return ([n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes], [n.node.embedding for n in nodes],
            [n.node.node_id for n in nodes])


def _copies(nodes: list[NodeWithScore], decided: list[tuple[int, dict[str, Any]]]) -> list[NodeWithScore]:
    out = []
    for i, meta in decided:
        node = nodes[i].node
        copy = node.model_copy(update={
            "metadata": {**node.metadata, METADATA_KEY: meta},
            "excluded_llm_metadata_keys": list(dict.fromkeys([*node.excluded_llm_metadata_keys, METADATA_KEY])),
            "excluded_embed_metadata_keys": list(dict.fromkeys([*node.excluded_embed_metadata_keys, METADATA_KEY])),
        })
        out.append(NodeWithScore(node=copy, score=nodes[i].score))
    return out


class ChunktreePostprocessor(BaseNodePostprocessor):
    """Orders nodes for the query (chunktree's reading order; query-free without one) and keeps
    the first ``top_k`` (default all). See ``chunktree.order`` for ``strategy`` and ``method``,
    ``integrations.common.Ranking`` for ``model``, ``cache``, ``use_embeddings``, ``backend`` and
    ``precision``."""

    model: str = DEFAULT_MODEL_NAME
    cache: str | bool = True
    strategy: str = DEFAULT_STRATEGY
    method: str = "auto"
    top_k: int | None = None
    use_embeddings: bool = True
    backend: str = "auto"
    precision: str = "auto"
    _ranking: Ranking = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        optional_positive_int(self.top_k, "top_k")
        self._ranking = Ranking(self.model, self.cache, self.strategy, self.method, self.use_embeddings,
                                backend=self.backend, precision=self.precision)

    @classmethod
    def class_name(cls) -> str:
        return "ChunktreePostprocessor"

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
                           ) -> list[NodeWithScore]:
        texts, embeddings, ids = _inputs(nodes)
        query = None if query_bundle is None else query_bundle.query_str
        return _copies(nodes, self._ranking.order(texts, embeddings, query, self.top_k, ids))


class ChunktreeSelector(BaseNodePostprocessor):
    """Keeps ``k`` representative nodes of ``k`` topics (``per_cluster`` each, cluster by
    cluster; every node when there are at most ``k``), whatever the query."""

    k: int
    per_cluster: int = 1
    seed: int = 0
    model: str = DEFAULT_MODEL_NAME
    cache: str | bool = True
    use_embeddings: bool = True
    backend: str = "auto"
    precision: str = "auto"
    _ranking: Ranking = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        positive_int(self.k, "k")
        positive_int(self.per_cluster, "per_cluster")
        self._ranking = Ranking(self.model, self.cache, use_embeddings=self.use_embeddings, backend=self.backend,
                                precision=self.precision)

    @classmethod
    def class_name(cls) -> str:
        return "ChunktreeSelector"

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
                           ) -> list[NodeWithScore]:
        texts, embeddings, _ = _inputs(nodes)
        return _copies(nodes, self._ranking.select(texts, embeddings, self.k, self.per_cluster, self.seed))


class ChunktreeEmbedding(BaseEmbedding):
    """LlamaIndex ``BaseEmbedding`` from chunktree's embedder (local ONNX, unit vectors), cached."""

    model_name: str = DEFAULT_MODEL_NAME
    cache: str | bool = True
    backend: str = "auto"
    precision: str = "auto"
    _ranking: Ranking = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._ranking = Ranking(self.model_name, self.cache, backend=self.backend, precision=self.precision)

    @classmethod
    def class_name(cls) -> str:
        return "ChunktreeEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._ranking.embed([query], "query")[0].tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._ranking.embed([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._ranking.embed(texts).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embedding(text)
