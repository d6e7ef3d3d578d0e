"""Split documents into token-bounded, overlapping chunks that keep their provenance.

Each document is tokenised once, with the embedder's own tokenizer, and every gap between two
tokens gets a boundary level: a heading starts (5), a blank line (4), a line break (3), a sentence
end (2), a space (1), or none (0, inside a word). A chunk fills up to the token capacity and ends
at the highest level found in the second half of its window (the furthest such gap when several
tie), so chunks are full and end at a heading, paragraph or sentence where one is near. The next
chunk starts up to ``overlap_tokens`` tokens earlier, at the best boundary in that stretch.

The cost is linear in the text: one tokenizer pass, numpy over the token offsets, and one short
scan per chunk. (semantic-text-splitter re-tokenises candidate chunks and scans the rest of a
segment for every chunk, which grows with the square of a long line; ``bench/bench_chunking.py``
measures both.)

``chunk_tokens`` counts what the embedder sees — the special tokens ([CLS], [SEP]) included — so a
chunk of the default 256 tokens fills exactly one window of all-MiniLM-L6-v2.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, integer
from chunktree.engine.documents import Document
from chunktree.progress import Progress
from chunktree.progress import progress as progress_counter

log = logging.getLogger(__name__)

DEFAULT_CHUNK_TOKENS = 256
DEFAULT_OVERLAP_TOKENS = 32

# Boundary levels of the gap before a token.
INSIDE, SPACE, SENTENCE, LINE, PARAGRAPH, HEADING = range(6)
# The tokenizer runs on pieces of about this many characters, cut at a space: its cost stays
# linear, its offsets stay small, and progress can be counted.
PIECE_CHARS = 1 << 16
PIECES_PER_PASS = 16
# Progress is shown for inputs of at least this many characters.
PROGRESS_CHARS = 4_000_000
# A document with at least this share of unknown tokens (and UNKNOWN_MIN_TOKENS of them) gets a warning.
UNKNOWN_SHARE = 0.1
UNKNOWN_MIN_TOKENS = 8

_SENTENCE_ENDS = np.array([ord(c) for c in ".!?…。！？"], dtype=np.uint32)
_UNSPACED_ENDS = np.array([ord(c) for c in "。！？"], dtype=np.uint32)  # end a sentence with no space after
_CLOSERS = np.array([ord(c) for c in "\"')]”’»"], dtype=np.uint32)


@dataclass(frozen=True)
class Chunk:
    """One chunk and where it came from: ``document.text[start:end] == text``.

    Attributes
    ----------
    id
        position of the chunk in the list it was returned in.
    source
        the document's source (path, URI, or ``path#id`` for a JSONL record).
    index
        position of the chunk within its source.
    start, end
        character offsets into the source document's text.
    page
        1-based PDF page where the chunk starts, else None.
    heading
        the nearest heading at or before the chunk's start, else None.
    meta
        the document's extra fields (JSONL records).
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

    @classmethod
    def from_dict(cls, row: Any) -> Chunk:
        """A chunk from ``to_dict``'s data (a line of an ``embed`` output's ``.jsonl``), each field's
        type checked: ``InvalidValueError`` names the first one that is wrong."""
        if not isinstance(row, dict):
            raise InvalidValueError(f"a chunk must be a JSON object; got {type(row).__name__}")
        for name, (kind, optional) in _FIELD_TYPES.items():
            if name not in row:
                if optional:
                    continue
                raise InvalidValueError(f"field {name!r} is missing")
            value = row[name]
            if not ((isinstance(value, kind) and not isinstance(value, bool)) or (value is None and optional)):
                allowed = kind.__name__ + (" or null" if optional else "")
                raise InvalidValueError(f"field {name!r} must be {allowed}; got {value!r:.60}")
        unknown = sorted(set(row) - set(_FIELD_TYPES))
        if unknown:
            raise InvalidValueError(f"unknown field(s) {unknown}; a chunk has {list(_FIELD_TYPES)}")
        if not 0 <= row["start"] <= row["end"]:
            raise InvalidValueError(f"start and end must satisfy 0 <= start <= end; got {row['start']}, {row['end']}")
        return cls(**{**row, "meta": row.get("meta") or {}})


# Each field of a chunk row: its type, and whether it may be null or left out.
_FIELD_TYPES: dict[str, tuple[type, bool]] = {"id": (int, False), "text": (str, False), "source": (str, False),
                                              "index": (int, False), "start": (int, False), "end": (int, False),
                                              "page": (int, True), "heading": (str, True), "meta": (dict, True)}


def chunk_documents(
    documents: Iterable[Document],
    tokenizer: Any,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
    progress: Progress = False,
) -> list[Chunk]:
    """Split ``documents`` into chunks of at most ``chunk_tokens`` tokens.

    Parameters
    ----------
    documents
        from ``read_paths`` or ``sample_documents``, or one at a time from ``iter_documents`` (each is
        chunked as it comes, and only its chunks are kept).
    tokenizer
        the embedder's ``tokenizers.Tokenizer`` (``Embedder.tokenizer``), without truncation
        or padding.
    chunk_tokens
        tokens per chunk, the tokenizer's special tokens included.
    overlap_tokens
        at most this many tokens are shared by consecutive chunks of a document.
    progress
        count characters chunked on stderr (for a list of at least ``PROGRESS_CHARS``, or any
        iterator of documents).
    """
    special = tokenizer.post_processor.num_special_tokens_to_add(False) if tokenizer.post_processor else 0
    if integer(chunk_tokens, "chunk_tokens") <= special:
        raise InvalidValueError(f"chunk_tokens must be > {special} (the special tokens); got {chunk_tokens!r}",
                                param="chunk_tokens")
    capacity = chunk_tokens - special
    integer(overlap_tokens, "overlap_tokens", 0, capacity - 1)
    if tokenizer.truncation is not None:
        raise InvalidValueError("tokenizer has truncation enabled; chunk sizes would be wrong (call no_truncation())")
    if tokenizer.padding is not None:
        raise InvalidValueError("tokenizer has padding enabled; chunk sizes would be wrong (call no_padding())")
    listed = isinstance(documents, Sequence)
    total = sum(len(doc.text) for doc in documents) if isinstance(documents, Sequence) else 0  # 0: unknown
    bar = progress_counter(total, "chunk", "char", enabled=progress if not listed or total >= PROGRESS_CHARS else False)
    chunks: list[Chunk] = []
    for doc in documents:
        starts, ends, levels = _tokens(doc, tokenizer, bar)
        heading_offsets = [offset for offset, _ in doc.headings]

        def fits(a: int, b: int, text: str = doc.text, starts: np.ndarray = starts, ends: np.ndarray = ends) -> bool:
            # Re-tokenised on its own, a piece of a word can take more tokens than it did in place.
            piece = text[int(starts[a]):int(ends[b - 1])]
            return len(tokenizer.encode(piece, add_special_tokens=False).ids) <= capacity

        for index, (a, b) in enumerate(_spans(levels, capacity, overlap_tokens, fits)):
            start, end = int(starts[a]), int(ends[b - 1])
            h = bisect.bisect_right(heading_offsets, start) - 1
            chunks.append(Chunk(
                id=len(chunks), text=doc.text[start:end], source=doc.source, index=index, start=start,
                end=end, page=bisect.bisect_right(doc.page_starts, start) if doc.page_starts else None,
                heading=doc.headings[h][1] if h >= 0 else None, meta=doc.meta,
            ))
    bar.close()
    return chunks


def _pieces(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of pieces of about ``PIECE_CHARS`` characters, cut after a space where there is one."""
    i = 0
    while i < len(text):
        j = min(len(text), i + PIECE_CHARS)
        if j < len(text):
            space = max(text.rfind(" ", i, j), text.rfind("\n", i, j))
            if space > i:
                j = space + 1
        yield i, j
        i = j


def _tokens(doc: Document, tokenizer: Any, bar: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Character offsets (start, end) of every token of ``doc.text`` and the level of the gap before it."""
    text = doc.text
    dtype = np.int32 if len(text) < 2**31 else np.int64
    pieces = list(_pieces(text))
    headings = np.array([offset for offset, _ in doc.headings], dtype=np.int64)
    unknown_token = getattr(tokenizer.model, "unk_token", None)
    unknown_id = tokenizer.token_to_id(unknown_token) if unknown_token else None
    unknown = 0
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    levels: list[np.ndarray] = []
    for p in range(0, len(pieces), PIECES_PER_PASS):
        group = pieces[p:p + PIECES_PER_PASS]
        encodings = tokenizer.encode_batch([text[s:e] for s, e in group], add_special_tokens=False)
        offsets = [_offsets(enc, dtype) + s for (s, _), enc in zip(group, encodings) if len(enc)]
        if unknown_id is not None:
            unknown += sum(enc.ids.count(unknown_id) for enc in encodings)
        bar.update(group[-1][1] - group[0][0])
        if not offsets:
            continue
        # The last token before this pass is included, so the gap before this pass's first token gets its level.
        previous = [np.array([[starts[-1][-1], ends[-1][-1]]], dtype=dtype)] if starts else []
        both = np.concatenate(previous + offsets)
        new = slice(1 if starts else 0, None)
        base = int(both[0, 0])
        local = _levels(text[base:int(both[-1, 1])], both[:, 0] - base, both[:, 1] - base, headings - base)
        starts.append(both[new, 0])
        ends.append(both[new, 1])
        levels.append(local[new])
    if not starts:
        return np.zeros(0, dtype), np.zeros(0, dtype), np.zeros(0, np.int8)
    n = sum(map(len, starts))
    if unknown >= UNKNOWN_MIN_TOKENS and unknown >= UNKNOWN_SHARE * n:
        log.warning("%s: %d of its %d tokens (%.0f%%) are unknown to the embedding model's vocabulary (%s): "
                    "their meaning is lost. The default model reads English; for other languages export a "
                    "multilingual model (docs: Models and embedding, 'Languages')", doc.source, unknown, n, 100 * unknown / n,
                    unknown_token)
    return np.concatenate(starts), np.concatenate(ends), np.concatenate(levels)


def _offsets(encoding: Any, dtype: type) -> np.ndarray:
    """(start, end) of each token, shape (n, 2): from an iterator, faster than ``np.asarray`` of the tuples."""
    pairs = encoding.offsets
    return np.fromiter(itertools.chain.from_iterable(pairs), dtype, count=2 * len(pairs)).reshape(-1, 2)


def _levels(text: str, starts: np.ndarray, ends: np.ndarray, headings: np.ndarray) -> np.ndarray:
    """The boundary level of the gap before each token of ``text`` (the first token's is unused).

    ``starts``, ``ends`` and ``headings`` (where heading lines start) are offsets into ``text``.
    """
    chars = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    newlines = np.concatenate(([0], np.cumsum(chars == 10, dtype=np.int32)))
    prev_end, start = ends[:-1], starts[1:]
    gap = start > prev_end
    lines = newlines[start] - newlines[prev_end]
    last = chars[prev_end - 1]
    before_last = chars[np.maximum(prev_end - 2, 0)]
    ends_sentence = np.isin(last, _SENTENCE_ENDS) | (np.isin(last, _CLOSERS) & np.isin(before_last, _SENTENCE_ENDS))
    levels = np.full(len(starts), INSIDE, dtype=np.int8)
    inner = levels[1:]
    inner[gap] = SPACE
    inner[(gap | np.isin(last, _UNSPACED_ENDS)) & ends_sentence] = SENTENCE
    inner[lines == 1] = LINE
    inner[lines >= 2] = PARAGRAPH
    # A heading starts between the end of token i-1 and the start of token i.
    heads = np.searchsorted(starts, headings[(headings >= 0) & (headings < len(text))])
    heads = heads[(heads > 0) & (heads < len(starts))]
    levels[heads[ends[heads - 1] <= starts[heads]]] = HEADING
    return levels


def _spans(levels: np.ndarray, capacity: int, overlap: int,
           fits: Callable[[int, int], bool]) -> Iterator[tuple[int, int]]:
    """Token spans [a, b) of the chunks: each at most ``capacity`` tokens, consecutive ones sharing
    at most ``overlap``. ``fits(a, b)`` is asked only of a span with an end inside a word."""
    n = len(levels)
    a = 0
    while a < n:
        if a + capacity >= n:
            b = n
        else:
            lo, hi = a + max(1, capacity // 2), a + capacity
            window = levels[lo:hi + 1][::-1]  # reversed: argmax takes the furthest of equal levels
            b = hi - int(np.argmax(window))
            if levels[b] == INSIDE:
                b = hi
        if (a > 0 and levels[a] == INSIDE) or (b < n and levels[b] == INSIDE):
            while b > a + 1 and not fits(a, b):
                b -= 1
        yield a, b
        if b == n:
            return
        nxt = b
        if overlap and levels[b] != INSIDE:
            lo = max(a + 1, b - overlap)
            back = levels[lo:b + 1]
            best = int(np.argmax(back))  # the highest level, the earliest of equal ones: most overlap
            if back[best] != INSIDE:
                nxt = lo + best
        a = nxt
