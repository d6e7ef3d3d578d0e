"""Embedding speed, fairly: the same texts, the same weights and the same thread count for every
runtime, in one run.

    pip install ".[bench]" torch==2.13.0 sentence-transformers fastembed   # the references
    python -m pytest bench/bench_embed.py

Runtimes (each with THREADS intra-op threads, checked: onnxruntime's session options, and
``torch.get_num_threads()``; threadpoolctl reports the BLAS pools):
- ``chunktree``: ``Embedder`` (onnxruntime, chunktree's graph);
- ``fastembed``: fastembed's ``TextEmbedding`` loading chunktree's own ONNX file and the model's
  tokenizer from a local folder (no download): the ONNX reference, same graph;
- ``sentence-transformers``: ``SentenceTransformer(...).encode`` on the same weights (PyTorch;
  it sorts by length, as chunktree does): the PyTorch reference;
- ``chunktree-int8``: ``Embedder("all-MiniLM-L6-v2-int8")`` (each window alone, so its batch size
  changes nothing).

Texts: N_CHUNKS chunks of the sample corpus of 247-256 tokens (within the 256-token window, so
nobody truncates), and N_SENTENCES short sentences. Chunks/s at batch 16/32/64 (median of 3 rounds
after one warm-up round: onnxruntime's first runs at new shapes are slower),
sentences/s at batch 64, a 15-word sentence alone (p50/p95 of 200 calls), and each runtime's
agreement with chunktree's fp32 vectors (min cosine).
"""

import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import summary

from chunktree import Embedder, chunk_documents, sample_documents
from chunktree.models import registry

THREADS = 2
N_CHUNKS = 200
BATCHES = (16, 32, 64)
SENTENCE = "The old captain watched the grey whale rise slowly beside the ship at dawn today."  # 15 words
assert len(SENTENCE.split()) == 15
N_SENTENCES = 1000
RUNTIMES = ("chunktree", "fastembed", "sentence-transformers", "chunktree-int8")


@pytest.fixture(scope="module")
def chunks():
    tokenizer = Embedder().tokenizer
    chunks = chunk_documents(sample_documents(), tokenizer, chunk_tokens=256, overlap_tokens=32)
    sizes = [len(e.ids) for e in tokenizer.encode_batch([c.text for c in chunks])]  # special tokens included
    full = [c.text for c, s in zip(chunks, sizes) if 247 <= s <= 256]
    step = max(1, len(full) // N_CHUNKS)
    picked = full[::step][:N_CHUNKS]
    assert len(picked) == N_CHUNKS
    return picked


def _chunktree():
    e = Embedder(threads=THREADS)
    assert e._session.get_session_options().intra_op_num_threads == THREADS
    e.warmup()
    return lambda texts, batch_size=32: e.embed(texts, batch_size=batch_size)


def _fastembed():
    fastembed = pytest.importorskip("fastembed")
    from fastembed.common.model_description import ModelSource, PoolingType

    weights = registry.weights_dir(registry.DEFAULT_MODEL)
    folder = Path(tempfile.mkdtemp(prefix="fastembed-chunktree-"))
    (folder / "model.onnx").symlink_to(registry.onnx_path(registry.DEFAULT_MODEL))
    for name in ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"):
        (folder / name).symlink_to(weights / name)
    name = "chunktree/all-MiniLM-L6-v2"
    if name not in [m["model"] for m in fastembed.TextEmbedding.list_supported_models()]:
        # chunktree's graph ends in the pooled, normalised sentence embedding: no pooling to add
        fastembed.TextEmbedding.add_custom_model(name, pooling=PoolingType.DISABLED, normalization=True,
                                                 sources=ModelSource(hf="chunktree/local-only"), dim=384,
                                                 model_file="model.onnx", output_name="sentence_embedding")
    model = fastembed.TextEmbedding(name, specific_model_path=str(folder), threads=THREADS)
    assert model.model.model.get_session_options().intra_op_num_threads == THREADS
    model.embed(["warm up"])
    return lambda texts, batch_size=32: np.array(list(model.embed(texts, batch_size=batch_size)), np.float32)


def _sentence_transformers():
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("sentence_transformers")
    torch.set_num_threads(THREADS)
    assert torch.get_num_threads() == THREADS
    model = st.SentenceTransformer(str(registry.weights_dir(registry.DEFAULT_MODEL)), device="cpu")
    model.encode(["warm up"])
    return lambda texts, batch_size=32: model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                                     convert_to_numpy=True)


def _chunktree_int8():
    e = Embedder("all-MiniLM-L6-v2-int8", threads=THREADS)
    assert e._session.get_session_options().intra_op_num_threads == THREADS
    e.warmup()
    return lambda texts, batch_size=32: e.embed(texts, batch_size=batch_size)  # each window alone, whatever the batch


MAKERS = {"chunktree": _chunktree, "fastembed": _fastembed, "sentence-transformers": _sentence_transformers,
          "chunktree-int8": _chunktree_int8}


@pytest.fixture(scope="module")
def runtime(request):
    return MAKERS[request.param]()


def _record(results, key, benchmark, n_items):
    data = np.array(benchmark.stats.stats.data)
    results["embed"][key] = {"median_s": float(np.median(data)), "p95_s": float(np.percentile(data, 95)),
                             "per_s": n_items / float(np.median(data))}
    benchmark.extra_info.update(results["embed"][key])


@pytest.mark.parametrize("runtime", RUNTIMES[1:], indirect=True)
def test_agreement(results, runtime, chunks, request):
    cos = np.sum(runtime(chunks) * MAKERS["chunktree"]()(chunks), axis=1)
    results["embed"][f"{request.node.callspec.params['runtime']}_agreement"] = float(cos.min())


@pytest.mark.parametrize("batch_size", BATCHES)
@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)
def test_throughput(benchmark, results, runtime, chunks, batch_size, request):
    benchmark.pedantic(runtime, args=(chunks,), kwargs={"batch_size": batch_size}, rounds=3, iterations=1,
                       warmup_rounds=1)
    _record(results, f"{request.node.callspec.params['runtime']}_b{batch_size}", benchmark, len(chunks))


@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)
def test_sentence_throughput(benchmark, results, runtime, request):
    sentences = [f"The captain watched whale number {i} rise beside the ship at dawn." for i in range(N_SENTENCES)]
    benchmark.pedantic(runtime, args=(sentences,), kwargs={"batch_size": 64}, rounds=3, iterations=1,
                       warmup_rounds=1)
    _record(results, f"{request.node.callspec.params['runtime']}_sentences", benchmark, N_SENTENCES)


@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)
def test_sentence_latency(benchmark, results, runtime, request):
    benchmark.pedantic(runtime, args=([SENTENCE],), rounds=200, iterations=1, warmup_rounds=5)
    _record(results, f"{request.node.callspec.params['runtime']}_sentence", benchmark, 1)


@summary
def embed_summary(results):
    r = results.get("embed", {})
    lines = []
    try:
        from threadpoolctl import threadpool_info

        pools = sorted({f"{p['internal_api']}={p['num_threads']}" for p in threadpool_info()})
        lines.append(f"embed: {THREADS} threads per runtime; BLAS pools in this process: {', '.join(pools)}")
    except ImportError:
        pass
    for bs in BATCHES:
        ours = r.get(f"chunktree_b{bs}")
        if not ours:
            continue
        line = f"embed batch {bs}: chunktree {ours['per_s']:.1f} chunks/s"
        for name in ("fastembed", "sentence-transformers"):
            ref = r.get(f"{name}_b{bs}")
            if ref:
                line += f" | {name} {ref['per_s']:.1f} (chunktree {ours['per_s'] / ref['per_s']:.2f}x)"
        q8, fe = r.get(f"chunktree-int8_b{bs}"), r.get(f"fastembed_b{bs}")
        if q8:
            line += f" | chunktree-int8 {q8['per_s']:.1f} ({q8['per_s'] / ours['per_s']:.2f}x fp32"
            line += f", {q8['per_s'] / fe['per_s']:.2f}x fastembed)" if fe else ")"
        lines.append(line)
    line = ", ".join(f"{name} {r[f'{name}_sentences']['per_s']:.0f}" for name in RUNTIMES if f"{name}_sentences" in r)
    if line:
        lines.append(f"{N_SENTENCES} short sentences at batch 64, sentences/s: {line}")
    for name in RUNTIMES:
        s = r.get(f"{name}_sentence")
        if s:
            lines.append(f"15-word sentence, {name}: p50 {s['median_s'] * 1e3:.2f} ms, p95 {s['p95_s'] * 1e3:.2f} ms")
        a = r.get(f"{name}_agreement")
        if a is not None:
            lines.append(f"agreement of {name} with chunktree on the {N_CHUNKS} chunks: min cosine {a:.7f}")
    return lines
