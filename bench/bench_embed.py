"""Embedding speed and agreement, fairly: the same texts, the same weights and the same thread count
for every runtime, in one run.

    pip install ".[bench]" torch==2.13.0 sentence-transformers fastembed   # the references
    python -m pytest bench/bench_embed.py

Runtimes (each on THREADS threads, checked: the embedder's own count, onnxruntime's session options,
``torch.get_num_threads()``):
- ``chunktree``: ``Embedder()``, its defaults (``auto``: OpenVINO bf16 on a CPU with bf16 units);
- ``chunktree-openvino-fp32``: ``Embedder(precision="fp32")`` (what auto gives a CPU without bf16 units);
- ``chunktree-onnxruntime``: ``Embedder(backend="onnxruntime")`` (fp32);
- ``chunktree-int8``: ``Embedder(precision="int8")`` (onnxruntime, each window alone);
- ``fastembed``: fastembed's ``TextEmbedding`` loading chunktree's own ONNX file and the model's
  tokenizer from a local folder (no download): the same graph on onnxruntime;
- ``st-fp32``: sentence-transformers' ``encode`` on the same weights (PyTorch fp32; it sorts by
  length, as chunktree does): **the reference** every runtime's agreement is measured against;
- ``st-bf16``: the same inside ``torch.autocast("cpu", dtype=torch.bfloat16)``;
- ``st-openvino``: sentence-transformers' OpenVINO backend (``backend="openvino"``, through
  optimum-intel: ``pip install "optimum-intel[openvino]"``, then ``pip install --no-deps torch==2.13.0``
  and ``pip uninstall torchvision``, as it pulls a CUDA torch and a torchvision built for it). It
  exports the model with OpenVINO's converter when it loads, which is the part of OpenVINO that
  sends telemetry unless opted out: run it offline.

Texts: N_CHUNKS chunks of the sample corpus of 247-256 tokens (within the window, so nobody
truncates), N_SENTENCES short sentences of the sample corpus, and MIXED held-out paragraphs of
mixed lengths (SQuAD-shifts, up to 256 tokens; skipped without ../shared/data). Chunks/s and
sentences/s at batch 1, 16 and 64 (chunktree: ``batch_size`` = that, no token budget), the mixed
paragraphs with each runtime's defaults (chunktree: its token budget), a 15-word sentence alone
(p50/p95 of 200 calls), and min cosine against ``st-fp32``. Median of 3 rounds after one warm-up.
End to end (``-k order_sample``): ``chunktree order --sample --no-cache`` cold with each backend.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import summary

from chunktree import Embedder, chunk_documents, sample_documents
from chunktree.models import registry

THREADS = 2
N_CHUNKS = 160
N_SENTENCES = 600
MIXED = 200
BATCHES = (1, 16, 64)
SENTENCE = "The old captain watched the grey whale rise slowly beside the ship at dawn today."  # 15 words
assert len(SENTENCE.split()) == 15
CHUNKTREE = {"chunktree": {}, "chunktree-openvino-fp32": {"precision": "fp32"},
             "chunktree-onnxruntime": {"backend": "onnxruntime"}, "chunktree-int8": {"precision": "int8"}}
RUNTIMES = (*CHUNKTREE, "fastembed", "st-fp32", "st-bf16", "st-openvino")
REFERENCE = "st-fp32"
SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad_shifts_new_wiki_v1.0.json"


@pytest.fixture(scope="module")
def texts():
    tokenizer = Embedder(backend="onnxruntime").tokenizer
    chunks = chunk_documents(sample_documents(), tokenizer, chunk_tokens=256, overlap_tokens=32)
    sizes = [len(e.ids) for e in tokenizer.encode_batch([c.text for c in chunks])]  # special tokens included
    full = [c.text for c, s in zip(chunks, sizes) if 247 <= s <= 256]
    picked = full[::max(1, len(full) // N_CHUNKS)][:N_CHUNKS]
    import pysbd

    segment = pysbd.Segmenter(language="en", clean=False)
    sentences = [s.strip() for c in full for s in segment.segment(c) if 6 <= len(s.split()) <= 30][:N_SENTENCES]
    out = {"chunks": picked, "sentences": sentences}
    if SQUAD.is_file():
        paragraphs = [p["context"] for a in json.loads(SQUAD.read_text())["data"] for p in a["paragraphs"]]
        lengths = [len(e.ids) for e in tokenizer.encode_batch(paragraphs)]
        mixed = [p for p, n in zip(paragraphs, lengths) if n <= 256]
        out["mixed"] = mixed[::max(1, len(mixed) // MIXED)][:MIXED]
    assert len(picked) == N_CHUNKS and len(sentences) == N_SENTENCES
    return out


def _chunktree(**settings):
    e = Embedder(threads=THREADS, **settings)
    assert e.threads == THREADS
    e.warmup()

    def run(texts, batch_size=None):
        if batch_size is None:
            return e.embed(texts)  # its defaults: the token budget
        return e.embed(texts, batch_size=batch_size, batch_tokens=10**9)

    run.choice = f"{e.backend} {e.precision}"
    return run


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

    def run(texts, batch_size=None):
        return np.array(list(model.embed(texts, **({} if batch_size is None else {"batch_size": batch_size}))), np.float32)

    return run


def _sentence_transformers(bf16=False, openvino=False):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("sentence_transformers")
    torch.set_num_threads(THREADS)
    assert torch.get_num_threads() == THREADS
    folder = str(registry.weights_dir(registry.DEFAULT_MODEL))
    if openvino:
        pytest.importorskip("optimum.intel")
        model = st.SentenceTransformer(folder, device="cpu", backend="openvino",
                                       model_kwargs={"ov_config": {"INFERENCE_NUM_THREADS": THREADS}})
        assert model[0].auto_model.request.get_property("INFERENCE_NUM_THREADS") == THREADS
    else:
        model = st.SentenceTransformer(folder, device="cpu")

    def run(texts, batch_size=None):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            v = model.encode(texts, **({} if batch_size is None else {"batch_size": batch_size}),
                             convert_to_numpy=False, convert_to_tensor=True)
        v = v.float()
        return torch.nn.functional.normalize(v, dim=1).numpy()

    run(["warm up"])
    return run


def make(name):
    if name in CHUNKTREE:
        return _chunktree(**CHUNKTREE[name])
    if name == "fastembed":
        return _fastembed()
    return _sentence_transformers(bf16=name == "st-bf16", openvino=name == "st-openvino")


@pytest.fixture(scope="module")
def runtime(request):
    return make(request.param)


@pytest.fixture(scope="module")
def reference(texts):
    ref = make(REFERENCE)
    return {kind: ref(t, 16) for kind, t in texts.items()}


def _record(results, key, benchmark, n_items):
    data = np.array(benchmark.stats.stats.data)
    results["embed"][key] = {"median_s": float(np.median(data)), "p95_s": float(np.percentile(data, 95)),
                             "per_s": n_items / float(np.median(data))}
    benchmark.extra_info.update(results["embed"][key])


def _name(request):
    return request.node.callspec.params["runtime"]


@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)
def test_agreement(results, runtime, texts, reference, request):
    """Min cosine against the PyTorch fp32 reference, on each kind of text."""
    for kind, t in texts.items():
        cos = np.sum(runtime(t, 16) * reference[kind], axis=1)
        results["embed"][f"{_name(request)}_agreement_{kind}"] = float(cos.min())
    if hasattr(runtime, "choice"):
        results["embed"][f"{_name(request)}_choice"] = runtime.choice


@pytest.mark.parametrize("batch_size", BATCHES)
@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)
def test_throughput(benchmark, results, runtime, texts, batch_size, request):
    benchmark.pedantic(runtime, args=(texts["chunks"],), kwargs={"batch_size": batch_size}, rounds=3, iterations=1,
                       warmup_rounds=1)
    _record(results, f"{_name(request)}_b{batch_size}", benchmark, N_CHUNKS)


@pytest.mark.parametrize("batch_size", BATCHES)
@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)
def test_sentence_throughput(benchmark, results, runtime, texts, batch_size, request):
    benchmark.pedantic(runtime, args=(texts["sentences"],), kwargs={"batch_size": batch_size}, rounds=3, iterations=1,
                       warmup_rounds=1)
    _record(results, f"{_name(request)}_sentences_b{batch_size}", benchmark, N_SENTENCES)


@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)
def test_mixed_lengths(benchmark, results, runtime, texts, request):
    if "mixed" not in texts:
        pytest.skip(f"held-out paragraphs not found at {SQUAD}")
    benchmark.pedantic(runtime, args=(texts["mixed"],), rounds=3, iterations=1, warmup_rounds=1)
    _record(results, f"{_name(request)}_mixed", benchmark, len(texts["mixed"]))


@pytest.mark.parametrize("runtime", RUNTIMES, indirect=True)
def test_sentence_latency(benchmark, results, runtime, request):
    benchmark.pedantic(runtime, args=([SENTENCE],), rounds=200, iterations=1, warmup_rounds=5)
    _record(results, f"{_name(request)}_sentence", benchmark, 1)


@pytest.mark.parametrize("backend", ["auto", "onnxruntime"])
def test_order_sample(results, backend, tmp_path):
    """``chunktree order --sample`` cold (no cache), in a new process, with each backend: the
    embedding seconds from its JSON record."""
    r = subprocess.run([sys.executable, "-m", "chunktree", "--no-progress", "order", "--sample", "--no-cache",
                        "--format", "json", "--top", "1", "--backend", backend, "--threads", str(THREADS)],
                       capture_output=True, text=True, check=True, timeout=1200)
    doc = json.loads(r.stdout)
    results["embed"][f"order_sample_{backend}"] = {
        "embed_s": doc["embedding"]["seconds"], "texts": doc["embedding"]["embedded"],
        "path": f"{doc['embedding']['backend']} {doc['embedding']['precision']}"}


def _ratio(r, a, b):
    return r[a]["per_s"] / r[b]["per_s"] if a in r and b in r else None


@summary
def embed_summary(results):
    r = results.get("embed", {})
    lines = [f"embed: {THREADS} threads per runtime; agreement is min cosine against {REFERENCE} (PyTorch fp32)"]
    if "chunktree_choice" in r:
        lines.append(f"chunktree auto ran {r['chunktree_choice']}")
    for kind, label in (("b{}", "256-token chunks, chunks/s"), ("sentences_b{}", "short sentences, sentences/s")):
        for bs in BATCHES:
            key = kind.format(bs)
            cells = [f"{n} {r[f'{n}_{key}']['per_s']:.1f}" for n in RUNTIMES if f"{n}_{key}" in r]
            if cells:
                lines.append(f"{label} at batch {bs}: {', '.join(cells)}")
            ratios = [(other, _ratio(r, f"chunktree_{key}", f"{other}_{key}"))
                      for other in ("chunktree-onnxruntime", "st-bf16", "st-openvino")]
            text = ", ".join(f"{x:.2f}x {other}" for other, x in ratios if x)
            if text:
                lines.append(f"  chunktree: {text}")
    cells = [f"{n} {r[f'{n}_mixed']['per_s']:.1f}" for n in RUNTIMES if f"{n}_mixed" in r]
    if cells:
        lines.append(f"{MIXED} held-out paragraphs of mixed lengths, each runtime's defaults, texts/s: {', '.join(cells)}")
        x = _ratio(r, "chunktree_mixed", "chunktree-onnxruntime_mixed")
        if x:
            lines.append(f"  chunktree: {x:.2f}x chunktree-onnxruntime")
    for n in RUNTIMES:
        s = r.get(f"{n}_sentence")
        if s:
            lines.append(f"15-word sentence alone, {n}: p50 {s['median_s'] * 1e3:.2f} ms, p95 {s['p95_s'] * 1e3:.2f} ms")
    for n in RUNTIMES:
        cells = [f"{kind} {r[f'{n}_agreement_{kind}']:.6f}" for kind in ("chunks", "sentences", "mixed")
                 if f"{n}_agreement_{kind}" in r]
        if cells:
            lines.append(f"agreement of {n}: {', '.join(cells)}")
    auto, ort = r.get("order_sample_auto"), r.get("order_sample_onnxruntime")
    if auto and ort:
        lines.append(f"order --sample cold, embedding: {auto['path']} {auto['embed_s']:.1f} s, {ort['path']} "
                     f"{ort['embed_s']:.1f} s ({ort['embed_s'] / auto['embed_s']:.2f}x faster), {auto['texts']} chunks")
    return lines
