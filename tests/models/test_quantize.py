"""The int8 model: batch-invariant, its own cache key, on real text in agreement with fp32 and the
PyTorch golden vectors, and on the project's own evaluations within fp32's intervals.

All marked real_data (CI runs them): quantising the model once per test run costs about 7 s cold,
more than the default run can spare.
"""

from pathlib import Path

import numpy as np
import pytest

from chunktree import Embedder, order, select
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.kernels.similarity import similarity_matrix
from chunktree.paths import cache_dir

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden_minilm.npz"


@pytest.fixture(scope="module")
def int8():
    return Embedder(precision="int8")


@pytest.mark.real_data
def test_a_text_embeds_bit_for_bit_the_same_alone_and_in_any_batch(int8):
    texts = [f"sentence number {i} " + "whale " * (i * 11 % 70) for i in range(24)]
    alone = np.stack([int8.embed([t])[0] for t in texts])
    for batch_size in (1, 8, 64):
        assert np.array_equal(int8.embed(texts, batch_size=batch_size), alone), batch_size
    perm = np.random.default_rng(0).permutation(len(texts))
    assert np.array_equal(int8.embed([texts[i] for i in perm]), alone[perm])


@pytest.mark.real_data
def test_agrees_with_pytorch_golden_vectors_and_fp32(int8, embedder):
    g = np.load(GOLDEN)
    within = g["tokens"] <= int8.window
    texts = [str(t) for t in g["texts"][within]]
    assert len(texts) >= 200
    got = int8.embed(texts)
    assert np.sum(got * g["vectors"][within], axis=1).min() >= 0.99
    to_fp32 = np.sum(got * embedder.embed(texts), axis=1)
    assert 0.99 <= to_fp32.min() < 0.99999  # close to fp32, and not fp32 itself


@pytest.mark.real_data
def test_its_vectors_never_mix_with_fp32_in_the_cache(int8, embedder, tmp_path):
    assert int8.model_id != embedder.model_id and int8.model_id.startswith("all-MiniLM-L6-v2-int8@")
    assert (int8.backend, int8.precision) == ("onnxruntime", "int8") and int8.vectors_id != embedder.vectors_id
    built = sorted(p.name for p in (cache_dir() / "models").glob("*.onnx"))
    assert [b for b in built if "int8" in b] == [int8.path.name]  # quantised from the one fp32 graph
    assert embedder.path.name in built
    texts = ["the white whale", "a ship at dawn"]
    with EmbeddingCache(tmp_path / "c.sqlite") as cache:
        fp, _ = embed_texts(texts, embedder, cache)
        q, stats = embed_texts(texts, int8, cache)
        assert stats.embedded == 2 and stats.cache_hits == 0  # fp32's entries are not int8's
        again, stats = embed_texts(texts, int8, cache)
        assert stats.cache_hits == 2 and np.array_equal(again, q) and not np.array_equal(q, fp)


def _in_interval(value, interval):
    return interval["lo"] - 1e-9 <= value <= interval["hi"] + 1e-9


@pytest.mark.real_data
def test_real_text_agreement_and_the_tree_on_squad_articles(int8, embedder, squad_articles):
    paragraphs = [p["context"] for a in squad_articles[:12] for p in a["paragraphs"]]
    assert len(paragraphs) >= 300
    x32, x8 = embedder.embed(paragraphs), int8.embed(paragraphs)
    assert np.sum(x32 * x8, axis=1).min() >= 0.99
    # the tree built on int8 vectors, weighed with fp32 similarities, against the fp32 tree
    sim = similarity_matrix(x32)
    weight = [sum(sim[i, p] for i, p in enumerate(order(x, method="exact").parent) if p >= 0) for x in (x32, x8)]
    assert weight[1] >= 0.995 * weight[0]


@pytest.mark.real_data
def test_select_coverage_within_the_fp32_interval(int8, embedder, squad_articles):
    from chunktree.engine.evaluate.stats import bootstrap

    articles = squad_articles[:12]
    paragraphs = [p["context"] for a in articles for p in a["paragraphs"]]
    label = np.repeat(np.arange(len(articles)), [len(a["paragraphs"]) for a in articles])
    coverage = {}
    for name, e in (("fp32", embedder), ("int8", int8)):
        x = e.embed(paragraphs)
        coverage[name] = [len(set(label[select(x, len(articles), seed=s).representatives])) / len(articles)
                          for s in range(10)]
    assert _in_interval(float(np.mean(coverage["int8"])), bootstrap(coverage["fp32"]))


@pytest.mark.real_data
def test_multi_hop_order_metrics_within_the_fp32_intervals(int8, embedder, shared_data):
    from chunktree.engine.evaluate import evaluate_orders, load

    _, passages = load(shared_data / "hotpotqa_dev_sample.jsonl")
    passages = passages[:80]
    fp32 = evaluate_orders(passages, embedder, None, orders=("dense", "bfs", "dense_tree"))["summary"]["all"]
    q8 = evaluate_orders(passages, int8, None, orders=("dense", "bfs", "dense_tree"))["summary"]["all"]
    checked = 0
    for name, metrics in fp32["orders"].items():
        for metric, interval in metrics.items():
            if " - " in metric or interval["n"] == 0:
                continue
            assert _in_interval(q8["orders"][name][metric]["mean"], interval), (name, metric)
            checked += 1
    assert checked >= 15
