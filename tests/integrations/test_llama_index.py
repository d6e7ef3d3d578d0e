import copy
from types import SimpleNamespace

import numpy as np
import pytest
from integration_corpus import QUERY, TEXTS, synthetic_vectors

from chunktree import order, select


@pytest.fixture(scope="module")
def li():
    """The framework and chunktree's adapter for it, imported when a test of this file runs rather than
    when the file is collected (every test worker collects every file)."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

    from chunktree.integrations.llama_index import ChunktreeEmbedding, ChunktreePostprocessor, ChunktreeSelector

    return SimpleNamespace(VectorStoreIndex=VectorStoreIndex, MockLLM=MockLLM, MetadataMode=MetadataMode,
                           NodeWithScore=NodeWithScore, TextNode=TextNode, ChunktreeEmbedding=ChunktreeEmbedding,
                           ChunktreePostprocessor=ChunktreePostprocessor, ChunktreeSelector=ChunktreeSelector)


@pytest.fixture
def nodes(li):
    return [li.NodeWithScore(node=li.TextNode(text=t, id_=f"node-{i}", metadata={"i": i}), score=1.0 - i / 10)
            for i, t in enumerate(TEXTS)]


def test_postprocessor_gives_chunktrees_order_and_leaves_the_input_alone(nodes, reference, li):
    before = copy.deepcopy(nodes)
    out = li.ChunktreePostprocessor().postprocess_nodes(nodes, query_str=QUERY)
    assert [n.node.metadata for n in nodes] == [n.node.metadata for n in before]
    assert [n.node.excluded_llm_metadata_keys for n in nodes] == [n.node.excluded_llm_metadata_keys for n in before]
    assert [n.node.node_id for n in out] == [f"node-{i}" for i in reference["query"]]
    assert [n.score for n in out] == [nodes[i].score for i in reference["query"]]
    for position, n in enumerate(out):
        assert n.node.metadata["chunktree"]["position"] == position and "i" in n.node.metadata
        # chunktree's entry stays out of what the LLM reads and what an embedder embeds
        assert "chunktree" not in n.node.get_content(metadata_mode=li.MetadataMode.LLM)
        assert "chunktree" not in n.node.get_content(metadata_mode=li.MetadataMode.EMBED)
    free = li.ChunktreePostprocessor().postprocess_nodes(nodes)
    assert [n.node.metadata["i"] for n in free] == reference["free"]


def test_node_embeddings_are_used_when_they_fit_and_texts_embedded_otherwise(nodes, embedder, reference, li):
    own = synthetic_vectors(len(nodes), embedder.dim, seed=1)
    for n, v in zip(nodes[::2], own[::2]):  # every other node carries an embedding, the rest none
        n.node.embedding = v.tolist()
    nodes[1].node.embedding = [1.0, 0.0, 0.0]  # of another dimension: its text is embedded
    x = reference["x"].copy()
    x[::2] = own[::2]
    out = li.ChunktreePostprocessor(top_k=4).postprocess_nodes(nodes, query_str=QUERY)
    assert [n.node.metadata["i"] for n in out] == order(x, reference["q"]).order[:4].tolist()
    ignored = li.ChunktreePostprocessor(use_embeddings=False).postprocess_nodes(nodes, query_str=QUERY)
    assert [n.node.metadata["i"] for n in ignored] == reference["query"]


def test_selector_keeps_one_node_per_topic(nodes, reference, li):
    out = li.ChunktreeSelector(k=3).postprocess_nodes(nodes)
    assert [n.node.metadata["i"] for n in out] == select(reference["x"], 3).representatives
    with pytest.raises(ValueError, match="k must be"):
        li.ChunktreeSelector(k=0)


def test_query_engine_with_chunktrees_embedding_and_postprocessor(reference, li):
    embed = li.ChunktreeEmbedding()
    np.testing.assert_allclose(embed.get_query_embedding(QUERY), reference["q"], atol=1e-6)
    index = li.VectorStoreIndex([li.TextNode(text=t, id_=f"node-{i}", metadata={"i": i}) for i, t in enumerate(TEXTS)],
                             embed_model=embed)
    retrieved = index.as_retriever(similarity_top_k=5).retrieve(QUERY)
    engine = index.as_query_engine(llm=li.MockLLM(), similarity_top_k=5, node_postprocessors=[li.ChunktreePostprocessor()])
    response = engine.query(QUERY)
    kept = [n.node.metadata["i"] for n in retrieved]
    assert [n.node.metadata["i"] for n in response.source_nodes] == [kept[j] for j in
                                                                      order(reference["x"][kept], reference["q"]).order]


def test_empty_single_and_bad_top_k(nodes, li):
    assert li.ChunktreePostprocessor().postprocess_nodes([], query_str=QUERY) == []
    (one,) = li.ChunktreePostprocessor().postprocess_nodes(nodes[:1], query_str=QUERY)
    assert one.node.node_id == "node-0" and one.node.metadata["chunktree"]["parent_id"] is None
    for bad in (0, -1):
        with pytest.raises(ValueError, match="top_k"):
            li.ChunktreePostprocessor(top_k=bad)
