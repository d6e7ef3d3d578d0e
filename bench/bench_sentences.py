"""Sentence splitting for the extractive reader: ``split_sentences`` (sentencex, with the reader's
own rules for wrapped lines, code and markup) against pysbd, a rule-based splitter in pure Python,
on the same chunks in the same run (pysbd from the bench extra).

    python -m pytest bench/bench_sentences.py

Chunks: the sample corpus (prose) and ../shared/data's SQuAD-Shifts paragraphs, chunked as the
reader gets them. The ratio is pysbd's time over split_sentences'.
"""

import json
import time
from pathlib import Path

import pytest
from conftest import summary

from chunktree import Embedder, chunk_documents, sample_documents
from chunktree.engine.documents import Document
from chunktree.engine.read.extractive import split_sentences

SQUAD = Path(__file__).resolve().parents[2] / "shared" / "data" / "squad_shifts_new_wiki_v1.0.json"


def _corpora():
    tokenizer = Embedder().tokenizer
    out = {"sample (Moby-Dick)": [c.text for c in chunk_documents(sample_documents(), tokenizer)]}
    if SQUAD.is_file():
        articles = json.loads(SQUAD.read_text(encoding="utf-8"))["data"]
        docs = [Document(a["title"], "\n\n".join(p["context"] for p in a["paragraphs"])) for a in articles[:60]]
        out["SQuAD-Shifts, 60 articles"] = [c.text for c in chunk_documents(docs, tokenizer)]
    return out


CORPORA = _corpora()


def _best_of(rounds, fn):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


@pytest.mark.parametrize("corpus", list(CORPORA))
def test_split_sentences_against_pysbd(benchmark, results, corpus):
    pysbd = pytest.importorskip("pysbd")
    texts = CORPORA[corpus]
    segmenter = pysbd.Segmenter(language="en", clean=False, char_span=True)
    spans = benchmark.pedantic(lambda: [split_sentences(t) for t in texts], rounds=3, iterations=1)
    ours = min(benchmark.stats.stats.data)
    reference, theirs = _best_of(3, lambda: [segmenter.segment(t) for t in texts])
    results["sentences"][corpus] = {"chunks": len(texts), "characters": sum(map(len, texts)),
                                    "split_sentences_s": ours, "pysbd_s": reference,
                                    "sentences": sum(map(len, spans)), "pysbd_sentences": sum(map(len, theirs))}


@summary
def _report(results):
    lines = []
    for corpus, r in results.get("sentences", {}).items():
        lines.append(f"{corpus}: {r['chunks']} chunks, {r['characters'] / 1e6:.2f} M characters; split_sentences "
                     f"{r['split_sentences_s']:.3f} s ({r['sentences']} sentences), pysbd {r['pysbd_s']:.3f} s "
                     f"({r['pysbd_sentences']} sentences): {r['pysbd_s'] / r['split_sentences_s']:.1f}x faster")
    return lines
