"""The extractive worker: a Chain-of-Agents memory that needs no LLM.

The memory is a set of sentences of the chunks read so far, at most ``memory_tokens`` tokens
(``Embedder.count_tokens``). Each step offers the new chunk's sentences; the kept ones and the new
ones compete by score, and the best that fit the budget stay. A sentence dropped once is gone.
Deterministic.

Two scores (``memory_weight``):

- query-only (``memory_weight=0``, the default): similarity to the query plus ``LEXICAL_WEIGHT``
  times the sentence's BM25 match with the query's words, as a share of the best sentence's
  (``lexical_scores``), or, without a query, similarity to the corpus centroid. A sentence's score
  never changes, so what is kept hardly depends on the order.
- memory-aware (``memory_weight > 0``): similarity to the query plus ``memory_weight`` times the
  highest similarity to another sentence of the step's pool (what the memory holds and the new
  chunk's sentences) from a *different* chunk. What the memory holds changes what the worker
  notices: with the first hop of a two-hop question held, a sentence about the bridge entity
  scores higher when it arrives, and the order matters. The pool is scored symmetrically, so
  neither the incumbents nor the newcomers get an edge by position alone.

On the HotpotQA dev sample (bench/eval_orders.py: both-gold retention per weight, 10% memory)
the memory-aware score keeps both gold paragraphs less often than the query-only one:
distractor paragraphs are similar to each other, and the memory term rewards that similarity as
much as the bridge. So query-only is the default; the memory-aware worker is an option
(``read --memory-weight``), reported beside it by eval-order.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.chunking import Chunk
from chunktree.engine.embedding import embed_texts
from chunktree.engine.lexical import LexicalIndex, lexical_tokens
from chunktree.engine.markup import shown
from chunktree.engine.read.memory import Step
from chunktree.progress import Progress

# The default reader is query-only: the memory-aware score kept less gold evidence on the shared
# data at every weight tried (bench/eval_orders.py, both-gold retention per weight).
DEFAULT_MEMORY_WEIGHT = 0.0
# The memory-aware reader eval-order reports beside it: the least harmful weight on the HotpotQA
# sample's bridge questions, where the memory term should help most.
MEMORY_AWARE_WEIGHT = 0.25
# The weight of a sentence's BM25 match with the query (as a share of the best sentence's) beside
# its similarity: the words a question names ("pre-ping", "HISTSIZE") find the sentence that holds
# them where the embedding ranks sentences on the same subject alike. Chosen on the man pages and
# the first 200 SQuAD-Shifts questions of bench/eval_extractive.py (0.2 to 0.6 quote about the
# same); its HotpotQA set, held out from the choice, checks it.
LEXICAL_WEIGHT = 0.3


# A line break inside a paragraph (hard-wrapped text): not a sentence end. A break before a blank
# line, a heading, a quote or a list item is left as it is.
_WRAPPED = re.compile(r"(?<![\n\r])\r?\n(?![\r\n#>]|[*+\-•]\s|\d+[.)]\s)")  # "\r\n" too (Windows text)
_NOT_AN_END = re.compile(r"(?<=[\s/~`'\"(\[])\.(?=\w)|(?<=\s)\.(?=\s+[a-z])|\.(?=_+[^\W_])|!(?=\[)")
_DIRECTIVE = re.compile(r"^[ \t]*\.\. [\w:-]+::[^\n]*", re.M)  # a reStructuredText directive's line
_FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*", re.M)  # a Markdown code block's fence line
_CLOSED_ASIDE = re.compile(r"(?<=[.!?]\)\s)(?=[A-Z])")  # after "(A sentence of its own.) ", before the next
_LIST_NUMBER = re.compile(r"^([ \t]*\(?(?:\d{1,3}|[a-zA-Z]))\.(?=[ \t])", re.M)  # "1. an item", "a. an item"
_CODE_SPAN = re.compile(r"(?<!`)(`{1,2})(?!`)[^`\n]{1,200}?\1(?!`)")  # inline code or a role's text (not a fence)
_END_MARK = re.compile(r"[.?!]")
_PUNCTUATION, _CLOSERS = frozenset(".!?:;"), frozenset("*_`'\"”’)]»")  # an end mark, markup that closes


def split_sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of ``text`` (sentencex), whitespace trimmed.

    A line break ends a sentence, except inside a paragraph: hard-wrapped lines are joined first
    (each such break read as a space: the offsets stay those of ``text``). A sentence in a Markdown
    code block ends at its closing fence at the latest, and one in brackets where they close ("(See
    the FAQ.) Then ..."). A dot that starts a word (a file's extension), an image's "!" and a list
    item's number ("1.") are no sentence's end. A reStructuredText directive's line (``..
    warning::``) is no part of a sentence, and a sentence keeps the markup that closes right after
    its end (``**Do not run it in production.**``)."""
    import sentencex

    spans: list[tuple[int, int]] = []
    # A dot that starts a word (".gz", "`.bashrc`", "the . builtin", ":attr:`.Pool`", "self._cache"),
    # the "!" of a Markdown image ("![a chart](c.png)") and a list item's dot are not a sentence's
    # end; they are hidden from sentencex behind a one-character stand-in, as is an end mark inside
    # inline code or a role's text (":doc:`What's New in 2.1? <whatsnew>`"), and a directive's line
    # behind spaces, so the offsets stay those of ``text``.
    joined = _NOT_AN_END.sub("_", _WRAPPED.sub(lambda m: " " * len(m.group(0)), text))
    joined = _LIST_NUMBER.sub(r"\1_", _CODE_SPAN.sub(lambda m: _END_MARK.sub("_", m.group(0)), joined))
    chars = list(joined)
    for m in _DIRECTIVE.finditer(text):
        chars[m.start():m.end()] = " " * (m.end() - m.start())
    for k, m in enumerate(_FENCE_LINE.finditer(text)):  # a code block's lines are one paragraph, up to its end
        for at in (m.start() - 1, m.end()) if k % 2 else (m.start() - 1,):  # the line breaks around a closing fence
            if 0 <= at < len(text):
                chars[at] = text[at]
    joined = "".join(chars)
    pieces, offset = [], 0
    for line in joined.splitlines(keepends=True):  # a line break left after the joining ends a sentence
        for part in _CLOSED_ASIDE.split(line):  # so does a sentence in brackets: "(See the FAQ.) Then"
            for piece in sentencex.segment("en", part):  # the pieces partition the line
                pieces.append((offset, offset + len(piece)))
                offset += len(piece)
    for start, end in pieces:
        start = max(start, spans[-1][1] if spans else 0)
        if text[end - 1:end] in _PUNCTUATION or text[end - 1:end] in _CLOSERS:
            while end < len(text) and text[end] in _CLOSERS:
                end += 1
        while start < end and joined[start].isspace():
            start += 1
        while end > start and joined[end - 1].isspace():
            end -= 1
        if end > start:
            spans.append((start, end))
    return spans


# What a quotable sentence is not: a heading's underline or a rule (a run of one punctuation mark),
# and a leading list marker ("a.", "*", "-", "12)") is not part of it.
_ADORNMENT = re.compile(r"([=\-~^*#_+`])\1{3,}")
_LIST_MARKER = re.compile(r"^(?:[*+\-•]|\(?[0-9]{1,3}[.)]|\(?[a-zA-Z][.)])\s+")
_ENDS_SENTENCE = re.compile(r"""[.!?:;]["'’”)\]]*$""")
_WORD = re.compile(r"[^\W\d_]{2,}")
# A man page's NAME line, under its NAME heading: the commands' names, a dash, what they do ("gzip,
# gunzip, zcat - compress or expand files", "ssh — OpenSSH remote login client"). It reads on its
# own, lower case and all.
_NAME_LINE = re.compile(r"[a-z][\w.+-]*(?:,\s*[\w.+-]+)*\s+[-—–]\s+\w[^\n]*")
_NAME_HEADING = re.compile(r"(?:^|\n)NAME\s*$")


# Licence and copyright lines: boilerplate, quoted only when the query asks about them.
_BOILERPLATE = re.compile(r"all rights reserved|\bcopyright\b|\(c\)\s*(?:19|20)\d\d|©|\blicen[cs]ed under\b|"
                          r"permission is (?:hereby )?granted|without (?:any )?warrant|general public licen[cs]e|"
                          r"free software foundation|you (?:can|may) redistribute", re.IGNORECASE)
ASKS_ABOUT_BOILERPLATE = re.compile(r"licen[cs]|copyright|warrant|redistribut|rights reserved", re.IGNORECASE)
# Where a reader lost inline code or markup: a word that needs what follows it, then punctuation
# ("gzip uses the .", "When configuring gzip, .").
_GAP = re.compile(r"\b(?:the|a|an|with|of|to|uses?|in|as|by|and|or|from|is|are|named|called)\s+"
                  r"(?:[,;:]|\.(?!\w)(?!\s+[a-z]))|,\s+[.,;:]", re.IGNORECASE)
MAX_LIST_CHARS = 1500  # the most of a list that a sentence introducing it carries with it
# An option's tag: a sentence quoted right after a fragment that starts with one, in its paragraph
# ("-t --test\nTest. Check the compressed file integrity."), is quoted from the tag on.
_OPTION_HEAD = re.compile(r"-{1,2}[A-Za-z0-9?]")


def quotable(sentence: str, last: bool, boilerplate: bool = False, named: bool = False) -> bool:
    """Whether a sentence reads on its own: at least three words, no heading underline or rule, not a
    heading-like fragment (under eight words without an end mark) unless it is a man page's NAME
    line (``_NAME_LINE``; ``named``: it comes right after the NAME heading), not the tail of a
    sentence (it starts in lower case, as one cut by its chunk's start or split at an abbreviation
    does), not cut by its chunk's end (the chunk's ``last`` sentence without an end mark), no hole
    where a reader lost inline code (``_GAP``), and not licence or copyright boilerplate unless
    ``boilerplate``."""
    body = _LIST_MARKER.sub("", shown(sentence).strip())
    if len(_WORD.findall(body)) < 3 or _ADORNMENT.search(body) or body.startswith("#"):
        return False
    if _GAP.search(body) or (not boilerplate and _BOILERPLATE.search(body)):
        return False
    if named and _NAME_LINE.fullmatch(body):
        return True
    ended = bool(_ENDS_SENTENCE.search(body))
    if not ended and (last or len(body.split()) < 8):
        return False
    return not body[:1].islower()


def list_after(text: str, end: int) -> int:
    """Where the list that the sentence ending at ``end`` introduces ends: the items on the lines
    after it (each starting with a list marker, with blank lines between and wrapped lines within
    them), up to ``MAX_LIST_CHARS``; ``end`` when no list follows."""
    first = text.find("\n", end)
    if first < 0 or text[end:first].strip():  # the sentence goes on, or nothing follows
        return end
    pos, last, in_item, blank = first + 1, end, False, False
    while pos < len(text) and pos - end <= MAX_LIST_CHARS:
        stop = text.find("\n", pos)
        stop = len(text) if stop < 0 else stop
        line = text[pos:stop]
        if not line.strip():
            blank = True
        elif _LIST_MARKER.match(line.lstrip()):
            in_item, blank, last = True, False, pos + len(line.rstrip())
        elif in_item and not blank:  # the item's next line
            last = pos + len(line.rstrip())
        else:
            break
        pos = stop + 1
    return last


_FENCE = re.compile(r"(?:```|~~~)[\w+-]*")  # a Markdown code block's fence line: ```console


def plain(sentence: str) -> str:
    """The sentence as the answer shows it: on one line, its links and roles as text (``shown``),
    without a list marker or a code block's fence lines; the items of a list it carries each on a
    line of their own."""
    lines: list[str] = []
    for line in shown(sentence).splitlines():
        flat = " ".join(line.split())
        if not flat or _FENCE.fullmatch(flat):
            continue
        if lines and not _LIST_MARKER.match(flat):
            lines[-1] += " " + flat
        else:
            lines.append(flat)
    if not lines:
        return ""
    return "\n".join([_LIST_MARKER.sub("", lines[0])] + ["  " + line for line in lines[1:]])


@dataclass(frozen=True)
class Sentences:
    """The quotable sentences (``quotable``) of a list of chunk texts, embedded once.

    Attributes
    ----------
    chunk, start, end
        int64 (m,), each sentence's chunk and its span in that chunk's text.
    tokens
        int64 (m,), tokens of each sentence.
    vectors
        float32 (m, d), unit rows.
    indptr
        int64 (n_chunks + 1,), the sentences of chunk i are ``indptr[i]:indptr[i + 1]``.
    key
        int64 (m,), the same number for sentences with the same words (case, spacing and list
        markers aside): the memory holds one of each, so overlapping chunks and repeated passages
        are not quoted twice.
    """

    chunk: np.ndarray
    start: np.ndarray
    end: np.ndarray
    tokens: np.ndarray
    vectors: np.ndarray
    indptr: np.ndarray
    key: np.ndarray

    @classmethod
    def of(cls, texts: Sequence[str], embedder: Any, cache: EmbeddingCache | None = None,
           progress: Progress = False, boilerplate: bool = False) -> Sentences:
        """The quotable sentences of ``texts`` (``boilerplate``: licence and copyright lines too);
        a sentence that introduces a list (it ends with a colon) carries the list's items, and one
        right after an option's tag and a fragment (``_OPTION_HEAD``) carries those."""
        spans, owns = [], []
        for i, text in enumerate(texts):
            found = split_sentences(text)
            k, before_quoted = 0, True  # whether the sentence before the k-th was quoted
            while k < len(found):
                a, b = found[k]
                if quotable(text[a:b], last=k == len(found) - 1, boilerplate=boilerplate,
                            named=bool(_NAME_HEADING.search(text, max(0, a - 40), a))):
                    own = (a, b)  # the sentence's own words: the tag or list it carries is not scored
                    if text[a:b].endswith(":"):
                        b = list_after(text, b)
                        if b == own[1]:  # a colon with no list after it in this chunk: cut by its end
                            k, before_quoted = k + 1, False
                            continue
                    if k and not before_quoted and _OPTION_HEAD.match(text[found[k - 1][0]:]) \
                            and "\n\n" not in text[found[k - 1][1]:a]:
                        a = found[k - 1][0]
                    spans.append((i, a, b))
                    owns.append(own)
                    before_quoted = True
                else:
                    before_quoted = False
                while k + 1 < len(found) and found[k + 1][0] < b:  # the list's own sentences are in it
                    k += 1
                k += 1
        sentence_texts = [texts[i][a:b] for i, a, b in spans]
        # A sentence that carries a list is scored by its own words: the items would blur them.
        own_texts = [texts[i][a:e] for (i, _, _), (a, e) in zip(spans, owns)]
        vectors, _ = embed_texts(own_texts, embedder, cache, progress=progress, prompt="document")
        table = np.array(spans, dtype=np.int64).reshape(-1, 3)
        indptr = np.searchsorted(table[:, 0], np.arange(len(texts) + 1)).astype(np.int64)
        keys: dict[str, int] = {}
        key = np.array([keys.setdefault(plain(t).casefold(), len(keys)) for t in sentence_texts], dtype=np.int64)
        return cls(table[:, 0], table[:, 1], table[:, 2], embedder.count_tokens(sentence_texts), vectors, indptr, key)


def lexical_index(sentences: Sentences, texts: Sequence[str]) -> LexicalIndex:
    """BM25 over the words of the sentences of ``texts`` (``lexical``), one entry a sentence: built
    once, asked for every query."""
    index = LexicalIndex()
    for i, a, b in zip(sentences.chunk.tolist(), sentences.start.tolist(), sentences.end.tolist()):
        index.add(lexical_tokens(texts[i][a:b]))
    return index


def lexical_scores(index: LexicalIndex, query: str) -> np.ndarray:
    """Each sentence's BM25 score for the query's words, as a share of the best one's (float64, in
    [0, 1]; all 0 when no sentence shares a word with it)."""
    scores = index.scores(lexical_tokens(query))
    best = float(scores.max()) if scores.size else 0.0
    return scores / best if best > 0 else scores


def query_scores(sentences: Sentences, index: LexicalIndex, query: str, query_vector: np.ndarray) -> np.ndarray:
    """The query-only score of each sentence: its similarity to the query (its embedding,
    ``query_vector``) plus ``LEXICAL_WEIGHT`` times ``lexical_scores`` (``index``: the sentences'
    ``lexical_index``)."""
    return sentences.vectors @ query_vector + LEXICAL_WEIGHT * lexical_scores(index, query)


def keep_best(candidates: list[tuple[float, int, int]], budget: int,
              key: np.ndarray | None = None) -> list[tuple[float, int, int]]:
    """The memory update: candidates (score, tokens, sentence id) taken by descending score
    (ties: lower id first), each kept if it still fits the token budget and, given ``key`` (one per
    sentence id), no sentence with its key is kept yet."""
    kept, used, taken = [], 0, set()
    for cand in sorted(candidates, key=lambda c: (-c[0], c[2])):
        k = None if key is None else int(key[cand[2]])
        if used + cand[1] <= budget and k not in taken:
            kept.append(cand)
            used += cand[1]
            if k is not None:
                taken.add(k)
    return kept


class ExtractiveWorker:
    """Reads chunks one step at a time and keeps the best-scoring sentences within the budget.

    Parameters
    ----------
    sentences
        ``Sentences.of(texts, ...)``.
    scores
        float (m,), each sentence's score (higher is kept first).
    memory_tokens
        the memory budget.
    texts
        the chunk texts (for the quotes).
    provenance
        the ``Chunk`` of each text, for source offsets of the evidence; optional.
    memory_weight
        weight of the similarity to the memory (0: query-only; see the module notes).
    """

    def __init__(self, sentences: Sentences, scores: np.ndarray, memory_tokens: int, texts: Sequence[str],
                 provenance: Sequence[Chunk | None] | None = None, memory_weight: float = 0.0) -> None:
        self.sentences, self.scores, self.memory_tokens = sentences, scores, memory_tokens
        self.texts, self.provenance, self.memory_weight = texts, provenance, memory_weight
        self.kept: list[tuple[float, int, int]] = []

    def read(self, chunk: int) -> list[tuple[float, int, int]]:
        """Offer chunk ``chunk``'s sentences to the memory; returns the new candidates it offered."""
        s = self.sentences
        new = np.arange(s.indptr[chunk], s.indptr[chunk + 1])
        kept = np.array([j for _, _, j in self.kept], dtype=np.int64)
        pool = np.concatenate([kept, new])
        scores = self.scores[pool].astype(np.float64)
        if self.memory_weight and kept.size:
            sim = s.vectors[pool] @ s.vectors[pool].T
            sim[s.chunk[pool][:, None] == s.chunk[pool][None, :]] = -np.inf  # other chunks only
            context = sim.max(axis=1)
            scores += self.memory_weight * np.where(np.isfinite(context), context, 0.0)
        offered = [(float(v), int(s.tokens[j]), int(j)) for v, j in zip(scores.tolist(), pool.tolist())]
        self.kept = keep_best(offered, self.memory_tokens, s.key)
        return offered[kept.size:]

    def step(self, index: int, group: list[tuple[int, str]], memory: dict[str, Any]) -> tuple[Step, dict[str, Any]]:
        """A ``read`` step over the chunks of ``group`` (the previous ``memory`` is this worker's own)."""
        t0 = time.perf_counter()
        offered = sum(c[1] for i, _ in group for c in self.read(i))
        memory = self.memory()
        step = Step(index, [i for i, _ in group], offered, 0, sum(c[1] for c in self.kept),
                    time.perf_counter() - t0, memory=memory)
        return step, memory

    def kept_sentences(self) -> list[int]:
        """Ids of the sentences in memory, best first."""
        return [j for _, _, j in self.kept]

    def memory(self) -> dict[str, Any]:
        s, evidence = self.sentences, []
        for score, _, j in self.kept:
            i, a, b = int(s.chunk[j]), int(s.start[j]), int(s.end[j])
            item: dict[str, Any] = {"chunk": i, "quote": self.texts[i][a:b], "score": round(score, 4)}
            chunk = self.provenance[i] if self.provenance is not None else None
            if chunk is not None:  # offsets into the source document
                item.update(source=chunk.source, start=chunk.start + a, end=chunk.start + b)
            evidence.append(item)
        return {"conclusion": evidence[0]["quote"] if evidence else "", "open_questions": [], "evidence": evidence}

    def answer(self, memory: dict[str, Any]) -> str:
        """The kept sentences, best first, each on one line of its own."""
        return "\n".join(plain(e["quote"]) for e in memory["evidence"])
