import copy
from types import SimpleNamespace

import numpy as np
import pytest
from integration_corpus import QUERY, TEXTS

from chunktree import order, select
from chunktree.checks import InvalidValueError


@pytest.fixture(scope="module")
def lc():
    """The framework and chunktree's adapter for it, imported when a test of this file runs rather than
    when the file is collected (every test worker collects every file)."""
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline
    from langchain_core.documents import Document
    from langchain_core.vectorstores import InMemoryVectorStore

    from chunktree.integrations.langchain import ChunktreeCompressor, ChunktreeEmbeddings, ChunktreeTransformer

    return SimpleNamespace(ContextualCompressionRetriever=ContextualCompressionRetriever,
                           DocumentCompressorPipeline=DocumentCompressorPipeline, Document=Document,
                           InMemoryVectorStore=InMemoryVectorStore, ChunktreeCompressor=ChunktreeCompressor,
                           ChunktreeEmbeddings=ChunktreeEmbeddings, ChunktreeTransformer=ChunktreeTransformer)


@pytest.fixture
def docs(lc):
    return [lc.Document(page_content=t, id=f"doc-{i}", metadata={"source": f"s{i % 3}", "i": i})
            for i, t in enumerate(TEXTS)]


def test_compressor_gives_chunktrees_order_and_leaves_the_input_alone(docs, reference, lc):
    before = copy.deepcopy(docs)
    out = lc.ChunktreeCompressor().compress_documents(docs, QUERY)
    assert docs == before
    assert [d.metadata["i"] for d in out] == reference["query"]
    assert [d.id for d in out] == [f"doc-{i}" for i in reference["query"]]
    for position, d in enumerate(out):  # the framework's metadata kept, chunktree's added
        meta = d.metadata["chunktree"]
        assert d.metadata["source"] == f"s{d.metadata['i'] % 3}" and meta["position"] == position
        if meta["parent_id"] is None:
            assert position == 0 and meta["parent_position"] is None
        else:
            assert out[meta["parent_position"]].id == meta["parent_id"]
    assert out[0].metadata["chunktree"]["query_similarity"] == pytest.approx(float(reference["x"][out[0].metadata["i"]]
                                                                                  @ reference["q"]), abs=1e-5)


def test_compressor_inside_a_retriever_and_a_pipeline(docs, reference, lc):
    store = lc.InMemoryVectorStore(embedding=lc.ChunktreeEmbeddings())
    store.add_documents(docs)
    retriever = lc.ContextualCompressionRetriever(base_compressor=lc.ChunktreeCompressor(),
                                               base_retriever=store.as_retriever(search_kwargs={"k": 5}))
    got = retriever.invoke(QUERY)
    retrieved = store.as_retriever(search_kwargs={"k": 5}).invoke(QUERY)
    x = reference["x"][[d.metadata["i"] for d in retrieved]]
    assert [d.id for d in got] == [retrieved[i].id for i in order(x, reference["q"]).order]

    pipeline = lc.DocumentCompressorPipeline(transformers=[lc.ChunktreeCompressor(top_k=3)])
    assert [d.metadata["i"] for d in pipeline.compress_documents(docs, QUERY)] == reference["query"][:3]


def test_embeddings_are_chunktrees_vectors(reference, lc):
    emb = lc.ChunktreeEmbeddings(cache=False)
    # Two texts against the reference's batch of all: the same vectors up to the backends' batch
    # invariance (bf16 on AMX picks its kernels by shape; tests/models/test_backends.py's bound).
    assert np.sum(np.asarray(emb.embed_documents(TEXTS[:2])) * reference["x"][:2], axis=1).min() >= 0.99999
    np.testing.assert_allclose(emb.embed_query(QUERY), reference["q"], atol=1e-6)


def test_the_adapters_take_the_embedders_backend_and_precision(lc):
    from chunktree import Embedder

    fp32 = Embedder(backend="onnxruntime").embed(TEXTS[:2])
    emb = lc.ChunktreeEmbeddings(cache=False, backend="onnxruntime", precision="fp32")
    np.testing.assert_allclose(emb.embed_documents(TEXTS[:2]), fp32, atol=1e-6)
    compressor = lc.ChunktreeCompressor(backend="onnxruntime")
    assert compressor._ranking.embedder.backend == "onnxruntime"
    with pytest.raises(ValueError, match=r"precision must be one of \['auto', 'fp32', 'bf16', 'int8'\]; got 'f32'"):
        lc.ChunktreeTransformer(precision="f32")


def test_transformer_orders_or_selects_without_a_query(docs, reference, lc):
    assert [d.metadata["i"] for d in lc.ChunktreeTransformer().transform_documents(docs)] == reference["free"]
    picked = lc.ChunktreeTransformer(3).transform_documents(docs)
    assert [d.metadata["i"] for d in picked] == select(reference["x"], 3).representatives
    assert [d.metadata["chunktree"]["cluster"] for d in picked] == [0, 1, 2]
    assert len(lc.ChunktreeTransformer(20).transform_documents(docs)) == len(docs)  # fewer documents than k: all


def test_empty_single_and_bad_input(docs, lc):
    assert lc.ChunktreeCompressor().compress_documents([], QUERY) == []
    (one,) = lc.ChunktreeCompressor().compress_documents(docs[:1], QUERY)
    assert one.id == "doc-0" and one.metadata["chunktree"]["parent_id"] is None
    for bad in (0, -2, 2.5):  # pydantic reports chunktree's error as a ValidationError, a ValueError
        with pytest.raises(ValueError, match="top_k"):
            lc.ChunktreeCompressor(top_k=bad)
    with pytest.raises(ValueError, match="strategy must be one of"):
        lc.ChunktreeCompressor(strategy="random")
    with pytest.raises(InvalidValueError, match="needs a query"):
        lc.ChunktreeTransformer(strategy="dense").transform_documents(docs)
