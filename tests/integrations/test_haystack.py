import copy
from types import SimpleNamespace

import numpy as np
import pytest
from integration_corpus import QUERY, TEXTS

from chunktree import order


@pytest.fixture(scope="module")
def hs():
    """The framework and chunktree's adapter for it, imported when a test of this file runs rather than
    when the file is collected (every test worker collects every file)."""
    from haystack import Document, Pipeline
    from haystack.components.embedders import MockDocumentEmbedder
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.components.writers import DocumentWriter
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from chunktree.integrations.haystack import ChunktreeDocumentEmbedder, ChunktreeRanker, ChunktreeTextEmbedder

    return SimpleNamespace(Document=Document, Pipeline=Pipeline, MockDocumentEmbedder=MockDocumentEmbedder,
                           InMemoryEmbeddingRetriever=InMemoryEmbeddingRetriever, DocumentWriter=DocumentWriter,
                           InMemoryDocumentStore=InMemoryDocumentStore, ChunktreeDocumentEmbedder=ChunktreeDocumentEmbedder,
                           ChunktreeRanker=ChunktreeRanker, ChunktreeTextEmbedder=ChunktreeTextEmbedder)


@pytest.fixture
def docs(hs):
    return [hs.Document(content=t, meta={"i": i}, score=1.0 - i / 10) for i, t in enumerate(TEXTS)]


def test_ranker_gives_chunktrees_order_and_leaves_the_input_alone(docs, reference, hs):
    before = copy.deepcopy(docs)
    ranker = hs.ChunktreeRanker()
    ranker.warm_up()
    out = ranker.run(docs, query=QUERY)["documents"]
    assert docs == before
    assert [d.id for d in out] == [docs[i].id for i in reference["query"]]
    assert [d.score for d in out] == [docs[i].score for i in reference["query"]]
    assert [d.meta["chunktree"]["position"] for d in out] == list(range(len(docs)))
    assert all(out[d.meta["chunktree"]["parent_position"]].id == d.meta["chunktree"]["parent_id"] for d in out[1:])
    assert [d.meta["i"] for d in ranker.run(docs)["documents"]] == reference["free"]
    assert [d.meta["i"] for d in ranker.run(docs, query=QUERY, top_k=2)["documents"]] == reference["query"][:2]


def test_embeddings_of_the_right_dimension_are_used_others_replaced(docs, reference, hs):
    wrong = hs.MockDocumentEmbedder(dimension=768).run(docs)["documents"]  # another model's: texts are embedded
    assert [d.meta["i"] for d in hs.ChunktreeRanker().run(wrong, query=QUERY)["documents"]] == reference["query"]
    fitting = hs.MockDocumentEmbedder(dimension=384).run(docs)["documents"]  # the right dimension: used as given
    own = np.array([d.embedding for d in fitting], dtype=np.float32)
    own /= np.linalg.norm(own, axis=1, keepdims=True)
    got = hs.ChunktreeRanker().run(fitting, query=QUERY)["documents"]
    assert [d.meta["i"] for d in got] == order(own, reference["q"]).order.tolist()
    assert [d.meta["i"] for d in hs.ChunktreeRanker(use_embeddings=False).run(fitting, query=QUERY)["documents"]
            ] == reference["query"]


def test_retrieval_pipeline_with_chunktrees_embedders_and_ranker(docs, reference, hs):
    store = hs.InMemoryDocumentStore()
    indexing = hs.Pipeline()
    indexing.add_component("embed", hs.ChunktreeDocumentEmbedder())
    indexing.add_component("write", hs.DocumentWriter(store))
    indexing.connect("embed.documents", "write.documents")
    indexing.run({"embed": {"documents": docs}})
    assert all(d.embedding is None for d in docs)  # the embedder set them on copies

    query = hs.Pipeline()
    query.add_component("embed", hs.ChunktreeTextEmbedder())
    query.add_component("retrieve", hs.InMemoryEmbeddingRetriever(store, top_k=5, return_embedding=True))
    query.add_component("rank", hs.ChunktreeRanker())
    query.connect("embed.embedding", "retrieve.query_embedding")
    query.connect("retrieve.documents", "rank.documents")
    result = query.run({"embed": {"text": QUERY}, "rank": {"query": QUERY}}, include_outputs_from={"retrieve"})
    kept = [d.meta["i"] for d in result["retrieve"]["documents"]]
    assert [d.meta["i"] for d in result["rank"]["documents"]] == [kept[j] for j in
                                                                   order(reference["x"][kept], reference["q"]).order]
    np.testing.assert_allclose(result["retrieve"]["documents"][0].embedding, reference["x"][kept[0]], atol=1e-6)


def test_components_serialise_and_the_loaded_pipeline_ranks_the_same(docs, tmp_path, hs):
    ranker = hs.ChunktreeRanker(top_k=3, strategy="bfs", cache=str(tmp_path / "c.sqlite"), backend="onnxruntime")
    data = ranker.to_dict()
    assert data["init_parameters"] == {"top_k": 3, "strategy": "bfs", "method": "auto", "model": "all-MiniLM-L6-v2",
                                       "cache": str(tmp_path / "c.sqlite"), "use_embeddings": True,
                                       "backend": "onnxruntime", "precision": "auto"}
    loaded_ranker = hs.ChunktreeRanker.from_dict(data)
    assert loaded_ranker.to_dict() == data
    loaded_ranker.warm_up()
    assert (loaded_ranker._ranking.embedder.backend, loaded_ranker._ranking.embedder.precision) == ("onnxruntime", "fp32")
    for cls in (hs.ChunktreeDocumentEmbedder, hs.ChunktreeTextEmbedder):
        assert cls.from_dict(cls(cache=False).to_dict()).to_dict() == cls(cache=False).to_dict()
    pipe = hs.Pipeline()
    pipe.add_component("rank", ranker)
    loaded = hs.Pipeline.loads(pipe.dumps(), allowed_modules=["chunktree.integrations.haystack"])
    first = pipe.run({"rank": {"documents": docs, "query": QUERY}})["rank"]["documents"]
    again = loaded.run({"rank": {"documents": docs, "query": QUERY}})["rank"]["documents"]
    assert [d.id for d in again] == [d.id for d in first] and len(first) == 3


def test_empty_single_and_bad_input(docs, hs):
    assert hs.ChunktreeRanker().run([], query=QUERY) == {"documents": []}
    (one,) = hs.ChunktreeRanker().run(docs[:1], query=QUERY)["documents"]
    assert one.id == docs[0].id and one.meta["chunktree"]["parent_id"] is None
    for bad in (0, -3, "2"):
        with pytest.raises((ValueError, TypeError), match="top_k"):
            hs.ChunktreeRanker(top_k=bad)
        with pytest.raises((ValueError, TypeError), match="top_k"):
            hs.ChunktreeRanker().run(docs, top_k=bad)
    with pytest.raises(TypeError, match=r"documents\[1\].*no text"):
        hs.ChunktreeRanker().run([docs[0], hs.Document(content=None)])
