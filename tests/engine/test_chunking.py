"""Chunks: token bounds, provenance that quotes back, coverage of the whole text, headings, pages."""

import re

import pytest
from tokenizers import Tokenizer

from chunktree import chunk_documents, read_paths, sample_documents
from chunktree.engine.documents import Document


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
        assert any(a.end > b.start for a, b in zip(chunks, chunks[1:]) if a.source == b.source)
    else:
        assert all(a.end <= b.start for a, b in zip(chunks, chunks[1:]) if a.source == b.source)
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
