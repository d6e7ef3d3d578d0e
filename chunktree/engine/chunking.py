"""Split documents into token-bounded, overlapping chunks that keep their provenance.

Splitting is semantic-text-splitter's: it fills each chunk up to the token capacity, preferring
to end at the largest boundary that fits (section, paragraph, sentence, word), and measures size
with the embedder's own tokenizer. ``chunk_tokens`` counts what the embedder sees — the special
tokens ([CLS], [SEP]) included — so a chunk of the default 256 tokens fills exactly one window of
all-MiniLM-L6-v2.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from chunktree.checks import InvalidValueError, integer
from chunktree.engine.documents import Document

DEFAULT_CHUNK_TOKENS = 256
DEFAULT_OVERLAP_TOKENS = 32


@dataclass(frozen=True)
class Chunk:
    """One chunk and where it came from: ``document.text[start:end] == text``.

    Attributes
    ----------
    id : position of the chunk in the list it was returned in.
    source : the document's source (path, URI, or ``path#id`` for a JSONL record).
    index : position of the chunk within its source.
    start, end : character offsets into the source document's text.
    page : 1-based PDF page where the chunk starts, else None.
    heading : the nearest heading at or before the chunk's start, else None.
    meta : the document's extra fields (JSONL records).
    """

    id: int
    text: str
    source: str
    index: int
    start: int
    end: int
    page: int | None = None
    heading: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def chunk_documents(
    documents: Sequence[Document],
    tokenizer: Any,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
) -> list[Chunk]:
    """Split ``documents`` into chunks of at most ``chunk_tokens`` tokens.

    Parameters
    ----------
    documents : from ``read_paths`` or ``sample_documents``.
    tokenizer : the embedder's ``tokenizers.Tokenizer`` (``Embedder.tokenizer``), without truncation.
    chunk_tokens : tokens per chunk, the tokenizer's special tokens included.
    overlap_tokens : at most this many tokens are shared by consecutive chunks of a document.
    """
    from semantic_text_splitter import MarkdownSplitter, TextSplitter

    special = tokenizer.post_processor.num_special_tokens_to_add(False) if tokenizer.post_processor else 0
    if integer(chunk_tokens, "chunk_tokens") <= special:
        raise InvalidValueError(f"chunk_tokens must be > {special} (the special tokens); got {chunk_tokens!r}")
    capacity = chunk_tokens - special
    integer(overlap_tokens, "overlap_tokens", 0, capacity - 1)
    if tokenizer.truncation is not None:
        raise InvalidValueError("tokenizer has truncation enabled; chunk sizes would be wrong (call no_truncation())")
    splitters = {
        "text": TextSplitter.from_huggingface_tokenizer(tokenizer, capacity, overlap=overlap_tokens),
        "markdown": MarkdownSplitter.from_huggingface_tokenizer(tokenizer, capacity, overlap=overlap_tokens),
    }
    chunks: list[Chunk] = []
    for doc in documents:
        heading_offsets = [offset for offset, _ in doc.headings]
        for index, (start, text) in enumerate(splitters[doc.kind].chunk_indices(doc.text)):
            h = bisect.bisect_right(heading_offsets, start) - 1
            page = bisect.bisect_right(doc.page_starts, start) if doc.page_starts else None
            chunks.append(Chunk(
                id=len(chunks), text=text, source=doc.source, index=index, start=start,
                end=start + len(text), page=page, heading=doc.headings[h][1] if h >= 0 else None,
                meta=doc.meta,
            ))
    return chunks
