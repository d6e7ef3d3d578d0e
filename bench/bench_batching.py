"""The token budget of a forward pass (``Embedder(batch_tokens=...)``): padding efficiency and
throughput for each budget, on the sample corpus's real chunks and on its short sentences, with
each backend, in one run. It chose ``DEFAULT_BATCH_TOKENS`` (per backend).

    python -m pytest bench/bench_batching.py

Padding efficiency = real tokens / tokens computed (each window padded to the longest of its pass).
Throughput: texts/s, median of 3 rounds after one warm-up, THREADS threads.
"""

import numpy as np
import pytest
from conftest import summary

from chunktree import Embedder, chunk_documents, sample_documents
from chunktree.models.embedder import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS, token_batches

THREADS = 2
BUDGETS = (512, 1024, 2048, 4096, 8192)
# "auto-unpadded": auto with every pass at its longest window's width, where auto pads windows of
# the session's pad_from tokens or more to a multiple of its pad_multiple (bf16 on AMX: 32 and 16).
BACKENDS = ("auto", "auto-unpadded", "onnxruntime")
N_CHUNKS, N_SENTENCES = 240, 600


@pytest.fixture(scope="module")
def texts():
    tokenizer = Embedder(backend="onnxruntime").tokenizer
    chunks = [c.text for c in chunk_documents(sample_documents(), tokenizer)]
    import pysbd

    segment = pysbd.Segmenter(language="en", clean=False)
    sentences = [s.strip() for c in chunks[::3] for s in segment.segment(c) if 4 <= len(s.split()) <= 40]
    return {"chunks": chunks[::max(1, len(chunks) // N_CHUNKS)][:N_CHUNKS], "sentences": sentences[:N_SENTENCES]}


@pytest.fixture(scope="module", params=BACKENDS)
def embedder(request):
    e = Embedder(backend=request.param.removesuffix("-unpadded"), threads=THREADS)
    if request.param.endswith("-unpadded"):
        e._session.pad_multiple = 1
    e.warmup()
    return e


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("kind", ["chunks", "sentences"])
def test_budget(benchmark, results, embedder, texts, kind, budget, request):
    lengths = np.array([len(e.ids) for e in embedder._window_tokenizer.encode_batch(texts[kind])])
    widths = embedder.pass_widths(lengths)
    batches = token_batches(widths, DEFAULT_BATCH_SIZE, budget)
    padded = sum(len(b) * int(widths[b].max()) for b in batches)
    benchmark.pedantic(embedder.embed, args=(texts[kind],), kwargs={"batch_tokens": budget}, rounds=3, iterations=1,
                       warmup_rounds=1)
    median = float(np.median(benchmark.stats.stats.data))
    key = f"{request.node.callspec.params['embedder']}_{kind}_{budget}"
    results["batching"][key] = {"per_s": len(texts[kind]) / median, "padding_efficiency": float(lengths.sum() / padded),
                                "passes": len(batches),
                                "path": f"{embedder.backend} {embedder.precision}, windows of {embedder._session.pad_from}+ "
                                        f"tokens padded to a multiple of {embedder._session.pad_multiple}",
                                "texts": len(texts[kind]), "mean_tokens": float(lengths.mean())}


@summary
def batching_summary(results):
    r = results.get("batching", {})
    lines = [f"batching: texts/s (padding efficiency) per budget of tokens a pass; at most {DEFAULT_BATCH_SIZE} windows "
             f"a pass; default budgets {DEFAULT_BATCH_TOKENS}"]
    for backend in BACKENDS:
        for kind in ("chunks", "sentences"):
            cells = [(b, r[f"{backend}_{kind}_{b}"]) for b in BUDGETS if f"{backend}_{kind}_{b}" in r]
            if not cells:
                continue
            first = cells[0][1]
            row = ", ".join(f"{b}: {m['per_s']:.0f} ({m['padding_efficiency']:.2f})" for b, m in cells)
            best = max(cells, key=lambda c: c[1]["per_s"])[0]
            lines.append(f"{first['path']}, {first['texts']} {kind} of {first['mean_tokens']:.0f} tokens on average: "
                         f"{row}; fastest {best}")
    return lines
