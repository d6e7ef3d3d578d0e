"""Chunking throughput (MB of text per second) on three shapes of text, against the tokenizer's
own single pass over the same text (the floor: chunking cannot be faster than tokenising once),
measured in the same run; semantic-text-splitter, a Rust splitter that re-tokenises each
candidate chunk, is measured on 1 MB when it is installed.

    python -m pytest bench/bench_chunking.py
    CHUNKTREE_BENCH_BIG=1 python -m pytest bench/bench_chunking.py -k big     # the 50 MB file

Shapes, each about 4 MB: the sample corpus as it is (prose with paragraphs), the same prose on one
line, and its words shuffled on one line without punctuation. "1 core" sets
TOKENIZERS_PARALLELISM=false; the default uses every core.

Goals (reported, not asserted): >= 1 MB/s on one core for every shape; a 50 MB one-line file in
under a minute.
"""

import os
import re
import time

import numpy as np
import pytest
from conftest import summary

from chunktree import Embedder, sample_documents
from chunktree.engine import chunking
from chunktree.engine.documents import Document

SIZE = 4_000_000


@pytest.fixture(scope="module")
def tokenizer():
    return Embedder().tokenizer


def _shapes():
    prose = "\n\n".join(d.text for d in sample_documents())
    words = re.findall(r"[A-Za-z]+", prose)
    np.random.default_rng(0).shuffle(words)
    repeat = SIZE // len(prose) + 1
    return {
        "prose": ("\n\n".join([prose] * repeat))[:SIZE],
        "one line": (" ".join([re.sub(r"\s+", " ", prose)] * repeat))[:SIZE],
        "no punctuation": (" ".join(words * (SIZE // len(" ".join(words)) + 1)))[:SIZE],
    }


SHAPES = _shapes()


def _mb_s(text, seconds):
    return len(text) / seconds / 1e6


@pytest.mark.parametrize("cores", ["all", "1"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_chunking(benchmark, results, tokenizer, monkeypatch, shape, cores):
    if cores == "1":
        monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    text = SHAPES[shape]
    doc = Document("mem://bench", text)
    pieces = [text[s:e] for s, e in chunking._pieces(text)]

    def chunk_then_tokenize():  # the floor measured in every round, beside the chunking
        t0 = time.perf_counter()
        tokenizer.encode_batch(pieces, add_special_tokens=False)
        tokenize_s.append(time.perf_counter() - t0)
        return chunking.chunk_documents([doc], tokenizer)

    tokenize_s = []
    benchmark.extra_info["note"] = "each round also times one tokenizer pass, excluded by subtracting below"
    chunks = benchmark.pedantic(chunk_then_tokenize, rounds=3, iterations=1)
    rounds = benchmark.stats.stats.data
    chunk_s = min(r - t for r, t in zip(rounds, tokenize_s))
    tokenize_s = min(tokenize_s)
    results["chunking"][(shape, cores)] = (_mb_s(text, chunk_s), _mb_s(text, tokenize_s), len(chunks))


def test_semantic_text_splitter_reference(results, tokenizer):
    splitter_module = pytest.importorskip("semantic_text_splitter")
    text = SHAPES["one line"][:1_000_000]
    splitter = splitter_module.TextSplitter.from_huggingface_tokenizer(tokenizer, 254, overlap=32)
    t0 = time.perf_counter()
    splitter.chunk_indices(text)
    results["chunking"]["semantic-text-splitter"] = _mb_s(text, time.perf_counter() - t0)


@pytest.mark.skipif(not os.environ.get("CHUNKTREE_BENCH_BIG"), reason="set CHUNKTREE_BENCH_BIG=1 for the 50 MB file")
def test_big_one_line_file(results, tokenizer):
    text = (" ".join([SHAPES["no punctuation"]] * 13))[:50_000_000]
    t0 = time.perf_counter()
    chunks = chunking.chunk_documents([Document("mem://big", text)], tokenizer)
    results["chunking"]["50 MB"] = (time.perf_counter() - t0, len(chunks))


@summary
def _report(results):
    r = results.get("chunking", {})
    lines = []
    for (shape, cores), (mb_s, floor, n) in sorted((k, v) for k, v in r.items() if isinstance(k, tuple)):
        lines.append(f"chunk {shape:15s} {cores:>3s} core(s): {mb_s:.2f} MB/s; one tokenizer pass {floor:.2f} MB/s "
                     f"(chunking at {mb_s / floor:.2f}x of it); {n} chunks")
    if "semantic-text-splitter" in r:
        lines.append(f"semantic-text-splitter, 1 MB on one line: {r['semantic-text-splitter']:.3f} MB/s")
    if "50 MB" in r:
        lines.append(f"50 MB without punctuation on one line: {r['50 MB'][0]:.1f} s, {r['50 MB'][1]} chunks")
    return lines
