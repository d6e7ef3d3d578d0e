"""Lexical matching: Okapi BM25 over an index that grows one text at a time (a dialogue's turns,
the extractive reader's sentences).

A dense embedding misses what names, dates and objects share ("the pottery class", "Sweden");
BM25 over the words of each text finds it. ``lexical_tokens`` keeps a text's words (letters or
digits, lower case) that are not function words (``FUNCTION_WORDS``), each reduced to its
Snowball stem ("paintings" and "painted" meet at "paint"). ``LexicalIndex`` holds them as
postings that a new text appends to, so adding one costs its own words, and ``scores`` costs
the postings of the query's words.
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter

import numpy as np
import snowballstemmer

# Words that carry no topic: pronouns, question words, auxiliaries, connectives.
FUNCTION_WORDS = frozenset("""
a an the and or but so then also too yet still just only even not no yes ok okay
i me my mine we us our you your he him his she her hers it its they them their theirs this that these those
there here what which who whom whose when where why how whether if than as
is am are was were be been being do does did done have has had having will would shall should can could
may might must of to in on at by for from with about into over after before up down out off again
more most much many some any all each every other another such same own very really quite
tell say said please thanks thank know think mean like one ones thing things something anything
""".split())
_WORD = re.compile(r"[^\W_]+")
_STEMMER = snowballstemmer.stemmer("english")
_STEMS: dict[str, str] = {}  # each word is stemmed once per process: a conversation repeats its words
K1, B = 1.2, 0.75  # Okapi BM25's usual settings


def _stem(word: str) -> str:
    stem = _STEMS.get(word)
    if stem is None:
        stem = _STEMMER.stemWord(word)
        if len(_STEMS) < 1_000_000:  # bounded: a stream of unique tokens cannot grow it without end
            _STEMS[word] = stem
    return stem


def lexical_tokens(text: str) -> list[str]:
    """The stems of the words of ``text`` that are not function words, in order."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in FUNCTION_WORDS]


class LexicalIndex:
    """Okapi BM25 (k1 = 1.2, b = 0.75) over documents added in order, numbered from 0."""

    def __init__(self) -> None:
        self._postings: dict[str, tuple[array, array]] = {}  # stem -> (document ids, counts)
        self._lengths = array("i")

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, tokens: list[str]) -> None:
        """Add the next document, as its tokens (``lexical_tokens``)."""
        doc = len(self._lengths)
        for stem, count in Counter(tokens).items():
            ids, counts = self._postings.setdefault(stem, (array("i"), array("i")))
            ids.append(doc)
            counts.append(count)
        self._lengths.append(len(tokens))

    def scores(self, tokens: list[str]) -> np.ndarray:
        """Each document's BM25 score for the query ``tokens`` (float64, one per document; 0 for
        a document that shares no stem with it); a stem the query repeats counts as often."""
        n = len(self._lengths)
        out = np.zeros(n)
        if not n:
            return out
        # copies, not views: a view would stop ``add`` from growing the arrays (BufferError)
        lengths = np.array(self._lengths, dtype=np.float64)
        norm = K1 * (1 - B + B * lengths / max(float(lengths.mean()), 1e-9))
        for stem, times in Counter(tokens).items():
            posting = self._postings.get(stem)
            if posting is None:
                continue
            ids = np.array(posting[0], dtype=np.int64)
            counts = np.array(posting[1], dtype=np.float64)
            idf = math.log(1 + (n - ids.size + 0.5) / (ids.size + 0.5))
            out[ids] += times * idf * counts * (K1 + 1) / (counts + norm[ids])
        return out
