"""Chunks: token bounds, provenance that quotes back, coverage of the whole text, headings, pages."""

import itertools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from chunktree import chunk_documents, read_paths, sample_documents
from chunktree.engine.documents import Document, _markdown_headings


def tokens(tokenizer, text):
    return len(tokenizer.encode(text).ids)  # special tokens included, as the embedder sees it


def check_chunks(docs, chunks, tokenizer, chunk_tokens):
    by_source = {d.source: d for d in docs}
    assert [c.id for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        doc = by_source[c.source]
        assert doc.text[c.start:c.end] == c.text  # provenance quotes the chunk back
        assert c.text.strip() == c.text and c.text
        assert tokens(tokenizer, c.text) <= chunk_tokens
    for doc in docs:
        mine = [c for c in chunks if c.source == doc.source]
        assert [c.index for c in mine] == list(range(len(mine)))
        assert [c.start for c in mine] == sorted(c.start for c in mine)
        covered = [False] * len(doc.text)
        for c in mine:
            covered[c.start:c.end] = [True] * (c.end - c.start)
        lost = "".join(ch for ch, cov in zip(doc.text, covered) if not cov)
        assert not lost.strip(), f"text not in any chunk: {lost.strip()[:80]!r}"


@pytest.mark.parametrize("chunk_tokens, overlap", [(256, 32), (64, 0), (128, 16)])
def test_sample_corpus_chunks(tokenizer, chunk_tokens, overlap):
    docs = sample_documents()[:12]
    chunks = chunk_documents(docs, tokenizer, chunk_tokens=chunk_tokens, overlap_tokens=overlap)
    check_chunks(docs, chunks, tokenizer, chunk_tokens)
    sizes = [tokens(tokenizer, c.text) for c in chunks]
    assert sum(sizes) / len(sizes) > 0.6 * chunk_tokens  # chunks are filled, not fragments
    if overlap:
        assert any(a.end > b.start for a, b in itertools.pairwise(chunks) if a.source == b.source)
    else:
        assert all(a.end <= b.start for a, b in itertools.pairwise(chunks) if a.source == b.source)
    assert all(c.heading == docs[int(c.source.split("_")[-1]) - 1].headings[0][1] for c in chunks)


def test_chunks_end_at_sentence_boundaries(tokenizer):
    docs = sample_documents()[:5]
    chunks = chunk_documents(docs, tokenizer, chunk_tokens=128, overlap_tokens=0)
    ends = [bool(re.search(r"[.!?;:\"'”’)\]]$", c.text)) for c in chunks]
    assert sum(ends) / len(ends) > 0.8


def test_markdown_headings_follow_chunks(tmp_path, tokenizer):
    sections = [f"# Section {i}\n\n" + " ".join(f"Sentence {j} of section {i} is here." for j in range(30))
                for i in range(3)]
    md = "\n\n".join(sections)
    (tmp_path / "doc.md").write_text(md, encoding="utf-8")
    docs = read_paths([tmp_path / "doc.md"])
    chunks = chunk_documents(docs, tokenizer, chunk_tokens=96, overlap_tokens=8)
    check_chunks(docs, chunks, tokenizer, 96)
    for c in chunks:
        before = md.rfind("# Section ", 0, c.start + len("# Section "))
        assert c.heading == md[before + 2:md.index("\n", before)]


def test_pdf_pages_follow_chunks(tmp_path, tokenizer):
    fpdf = pytest.importorskip("fpdf")
    pdf = fpdf.FPDF()
    pdf.set_font("helvetica", size=10)
    for page in range(3):
        pdf.add_page()
        pdf.multi_cell(w=0, text=" ".join(f"Page {page + 1} sentence {j}." for j in range(60)))
    pdf.output(str(tmp_path / "p.pdf"))
    docs = read_paths([tmp_path / "p.pdf"])
    chunks = chunk_documents(docs, tokenizer, chunk_tokens=64, overlap_tokens=0)
    check_chunks(docs, chunks, tokenizer, 64)
    assert {c.page for c in chunks} == {1, 2, 3}
    for c in chunks:
        assert c.text.split()[1] == str(c.page) or c.text.split()[0] != "Page"


def test_tiny_document_is_one_chunk(tokenizer):
    doc = Document("mem://x", "Just one sentence.")
    (c,) = chunk_documents([doc], tokenizer)
    assert (c.text, c.start, c.end, c.index, c.page, c.heading) == ("Just one sentence.", 0, 18, 0, None, None)


def test_parameter_errors(tokenizer):
    doc = [Document("mem://x", "text")]
    with pytest.raises(ValueError, match=r"chunk_tokens must be > 2 \(the special tokens\); got 2"):
        chunk_documents(doc, tokenizer, chunk_tokens=2)
    with pytest.raises(ValueError, match=r"overlap_tokens must be in \[0, 61\]; got 62"):
        chunk_documents(doc, tokenizer, chunk_tokens=64, overlap_tokens=62)
    with pytest.raises(ValueError, match=r"overlap_tokens must be in \[0, 61\]; got -1"):
        chunk_documents(doc, tokenizer, chunk_tokens=64, overlap_tokens=-1)
    truncating = Tokenizer.from_str(tokenizer.to_str())
    truncating.enable_truncation(128)
    with pytest.raises(ValueError, match="truncation enabled"):
        chunk_documents(doc, truncating)


def shared(a, b, text):
    """The text two consecutive chunks of one document share."""
    return text[b.start:a.end] if b.start < a.end else ""


class CountingTokenizer:
    """The real tokenizer, counting the characters it is given."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.chars = 0

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def encode(self, text, **kwargs):
        self.chars += len(text)
        return self._tokenizer.encode(text, **kwargs)

    def encode_batch(self, texts, **kwargs):
        self.chars += sum(map(len, texts))
        return self._tokenizer.encode_batch(texts, **kwargs)


def words_text(n_chars, seed=0, sentence_every=None, line_every=None):
    """Random lowercase words joined by spaces: one line without punctuation unless asked."""
    rng = np.random.default_rng(seed)
    vocab = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), rng.integers(2, 10))) for _ in range(3000)]
    out, size, i = [], 0, 0
    while size < n_chars:
        w = vocab[rng.integers(len(vocab))]
        i += 1
        if sentence_every and i % sentence_every == 0:
            w += "."
        if line_every and i % line_every == 0:
            w += "\n"
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


@pytest.mark.parametrize("shape", ["one line, no punctuation", "sentences on one line", "lines"])
def test_tokenizer_reads_each_character_about_once(tokenizer, shape):
    # The cost of chunking is one tokenizer pass: a 300 kB line used to be re-tokenised per chunk.
    text = words_text(300_000, sentence_every=12 if shape != "one line, no punctuation" else None,
                      line_every=40 if shape == "lines" else None)
    counting = CountingTokenizer(tokenizer)
    doc = Document("mem://big", text)
    chunks = chunk_documents([doc], counting, chunk_tokens=128, overlap_tokens=16)
    assert len(text) <= counting.chars <= 1.01 * len(text)  # all of it, through this tokenizer, about once
    check_chunks([doc], chunks, tokenizer, 128)


def test_piece_size_does_not_change_the_chunks(tokenizer, monkeypatch):
    import chunktree.engine.chunking as chunking

    text = words_text(40_000, seed=1, sentence_every=9, line_every=70)
    doc = Document("mem://x", text)
    whole = chunk_documents([doc], tokenizer, chunk_tokens=64, overlap_tokens=8)
    monkeypatch.setattr(chunking, "PIECE_CHARS", 700)
    monkeypatch.setattr(chunking, "PIECES_PER_PASS", 3)
    assert chunk_documents([doc], tokenizer, chunk_tokens=64, overlap_tokens=8) == whole


def test_a_long_unspaced_run_is_cut_inside_and_still_fits(tokenizer):
    blob = "".join(np.random.default_rng(2).choice(list("abcdefghijklmnopqrstuvwxyz0123456789+/"), 6000))
    text = f"Intro sentence here. {blob} and a closing sentence."
    doc = Document("mem://blob", text)
    chunks = chunk_documents([doc], tokenizer, chunk_tokens=64, overlap_tokens=8)
    check_chunks([doc], chunks, tokenizer, 64)
    assert len(chunks) > 10


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(st.sampled_from(["word", "Longerword", "a", "x" * 40, ".", "!", "?", ",", " ", "  ", "\n",
                                    "\n\n", "# Head\n", "。", "日本語", "🙂", "é", "'s", "\"Quote.\"", "\t"]),
                   min_size=1, max_size=400),
    chunk_tokens=st.integers(4, 40),
    overlap=st.integers(0, 6),
)
def test_any_text_chunks_within_bounds_and_loses_nothing(tokenizer, parts, chunk_tokens, overlap):
    text = "".join(parts)
    overlap = min(overlap, chunk_tokens - 3)
    if not text.strip():
        return
    doc = Document("mem://h", text, kind="markdown", headings=_markdown_headings(text))
    chunks = chunk_documents([doc], tokenizer, chunk_tokens=chunk_tokens, overlap_tokens=overlap)
    check_chunks([doc], chunks, tokenizer, chunk_tokens)
    for a, b in itertools.pairwise(chunks):
        assert len(tokenizer.encode(shared(a, b, text), add_special_tokens=False).ids) <= overlap


def test_progress_lines_when_stderr_is_not_a_terminal(tokenizer, monkeypatch, capsys):
    import chunktree.engine.chunking as chunking

    monkeypatch.setattr(chunking, "PROGRESS_CHARS", 1000)
    monkeypatch.setattr(chunking, "PIECE_CHARS", 2000)
    monkeypatch.setattr(chunking, "PIECES_PER_PASS", 1)
    monkeypatch.setenv("CHUNKTREE_PROGRESS_SECONDS", "0")
    text = words_text(10_000, sentence_every=10)
    chunk_documents([Document("mem://p", text)], tokenizer, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 5 and all(line.startswith("chunk: ") and " char " in line for line in lines)
    assert lines[-1].startswith(f"chunk: {len(text) / 1000:.1f}k/{len(text) / 1000:.1f}k char (100%)")


@pytest.mark.parametrize("text, warned", [
    ("我们今天去公园散步，天气很好。" * 20, True),  # 60% [UNK]
    ("🙂🎉🚀🐳 " * 30, True),
    ("Call me Ishmael. Some years ago, never mind how long precisely. " * 20, False),
])
def test_a_document_the_vocabulary_does_not_cover_is_named_in_a_warning(tokenizer, caplog, text, warned):
    with caplog.at_level("WARNING"):
        chunk_documents([Document("mem://lang", text)], tokenizer)
    assert ("mem://lang:" in caplog.text and "unknown to the embedding model's vocabulary ([UNK])" in caplog.text) == warned
