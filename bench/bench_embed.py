"""Embedding speed: chunks/s on 256-token chunks of the sample corpus and single-sentence latency,
against the PyTorch reference (BertModel + mean pooling, length-sorted batches, as
sentence-transformers' encode does) measured in the same run when torch is installed.

    python -m pytest bench/bench_embed.py

Goals (reported, not asserted): throughput >= 1.5x PyTorch; single-sentence p50 <= 10 ms.
"""

import numpy as np
import pytest
from conftest import summary

from chunktree import Embedder, chunk_documents, sample_documents
from chunktree.models import registry

N_CHUNKS = 192
SENTENCE = "The old captain watched the grey whale rise slowly beside the ship at dawn today."  # 15 words
assert len(SENTENCE.split()) == 15


@pytest.fixture(scope="module")
def embedder():
    e = Embedder()
    e.warmup()
    return e


@pytest.fixture(scope="module")
def chunks(embedder):
    chunks = chunk_documents(sample_documents(), embedder.tokenizer, chunk_tokens=256, overlap_tokens=32)
    step = len(chunks) // N_CHUNKS
    return [c.text for c in chunks[::step][:N_CHUNKS]]


@pytest.fixture(scope="module")
def torch_reference():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = registry.weights_dir(registry.DEFAULT_MODEL)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModel.from_pretrained(folder).eval()

    def encode(texts, batch_size=32):
        order = np.argsort([-len(t) for t in texts], kind="stable")  # as sentence-transformers sorts
        out = np.empty((len(texts), model.config.hidden_size), np.float32)
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                idx = order[i:i + batch_size]
                batch = tokenizer([texts[j] for j in idx], padding=True, truncation=True, max_length=256,
                                  return_tensors="pt")
                hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out[idx] = torch.nn.functional.normalize(pooled, dim=1).numpy()
        return out

    encode(["warm up"])
    return encode


def _record(results, key, benchmark, n_items):
    data = np.array(benchmark.stats.stats.data)
    results["embed"][key] = {"median_s": float(np.median(data)), "p95_s": float(np.percentile(data, 95)),
                             "per_s": n_items / float(np.median(data))}
    benchmark.extra_info.update(results["embed"][key])


@pytest.mark.parametrize("batch_size", [16, 32, 64])
def test_throughput_onnx(benchmark, results, embedder, chunks, batch_size):
    benchmark.pedantic(embedder.embed, args=(chunks,), kwargs={"batch_size": batch_size}, rounds=3, iterations=1)
    _record(results, f"onnx_b{batch_size}", benchmark, len(chunks))


@pytest.mark.parametrize("batch_size", [16, 32, 64])
def test_throughput_torch(benchmark, results, torch_reference, chunks, batch_size):
    benchmark.pedantic(torch_reference, args=(chunks,), kwargs={"batch_size": batch_size}, rounds=3, iterations=1)
    _record(results, f"torch_b{batch_size}", benchmark, len(chunks))


def test_latency_onnx(benchmark, results, embedder):
    benchmark.pedantic(embedder.embed, args=([SENTENCE],), rounds=200, iterations=1, warmup_rounds=5)
    _record(results, "onnx_sentence", benchmark, 1)


def test_latency_torch(benchmark, results, torch_reference):
    benchmark.pedantic(torch_reference, args=([SENTENCE],), rounds=200, iterations=1, warmup_rounds=5)
    _record(results, "torch_sentence", benchmark, 1)


@summary
def embed_summary(results):
    r = results.get("embed", {})
    lines = []
    for bs in (16, 32, 64):
        ours, ref = r.get(f"onnx_b{bs}"), r.get(f"torch_b{bs}")
        if ours:
            line = f"embed batch {bs}: onnx {ours['per_s']:.1f} chunks/s"
            if ref:
                ratio = ours["per_s"] / ref["per_s"]
                line += f" | torch {ref['per_s']:.1f} chunks/s | ratio {ratio:.2f}x (goal >= 1.5x: {'met' if ratio >= 1.5 else 'NOT met'})"
            lines.append(line)
    for name in ("onnx", "torch"):
        s = r.get(f"{name}_sentence")
        if s:
            goal = f" (goal p50 <= 10 ms: {'met' if s['median_s'] <= 0.010 else 'NOT met'})" if name == "onnx" else ""
            lines.append(f"15-word sentence, {name}: p50 {s['median_s'] * 1e3:.2f} ms, p95 {s['p95_s'] * 1e3:.2f} ms{goal}")
    return lines
