"""A conversation kept as a forest of topic trees (Context-Agent, arXiv 2604.05552; our own code).

One tree per topic, one node per turn; a branch is a path inside a tree, made where the user goes
back to an earlier point and refines it. ``Forest.add`` places each turn (``decide``), and
``Forest.context`` gives the next turn the earlier turns it most likely needs, verbatim (ranked
by ``context.relevance``), plus one line for every other topic and branch, within a token budget.

All node vectors sit in one array: placing a turn costs one matrix-vector product over them, and
work per tree only for the ``SHORTLIST`` trees that fit it best (and the current one).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, integer, json_loads, normalised, positive_int, text
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.engine.inputs import default_embedder
from chunktree.engine.lexical import LexicalIndex, lexical_tokens
from chunktree.engine.results import dumps
from chunktree.files import replacing
from chunktree.track.context import RELEVANCE_KEEP, Context, choose, match, reason, relevance, relevance_features
from chunktree.track.decide import (
    Candidate,
    Decision,
    LLMJudge,
    Match,
    Placement,
    Thresholds,
    announced,
    content_words,
    decide,
    decide_learned,
    topic_words,
    turn_cues,
)
from chunktree.track.learned import LearnedDecider, decider_for, tree_features
from chunktree.track.storage import (
    FORMAT,
    JOURNAL_MIN,
    VERSION,
    ForestFileError,
    Node,
    check_document,
    journal_path,
    replay,
)

log = logging.getLogger(__name__)

SUMMARY_TOKENS = 24
_HEADER = "Earlier topics and branches of this conversation, most recent first:\n"
SHORTLIST = 16  # a turn is weighed in full against this many best-fitting trees, and the current one
_SENTENCE = re.compile(r"[^.!?。！？]+[.!?。！？]*")


def _texts(node: Node) -> list[str]:
    """The node's texts as context messages: the user's, and the assistant's when there is one."""
    return [node.user, node.assistant] if node.assistant else [node.user]


class _Tree:
    """A topic: its node ids (also as an array), the sum of their vectors, their content words,
    and where it was left."""

    def __init__(self, tree_id: int, dim: int) -> None:
        self.id = tree_id
        self.node_ids: list[int] = []
        self._rows = np.zeros(4, np.int64)
        self.sum = np.zeros(dim, np.float64)
        self.words: set[str] = set()
        self.anchor: int = -1
        self.last_turn: int = -1
        self.branches = 1

    @property
    def rows(self) -> np.ndarray:
        return self._rows[:len(self.node_ids)]

    def append(self, node_id: int, vector: np.ndarray, words: set[str]) -> None:
        n = len(self.node_ids)
        if n == len(self._rows):
            self._rows = np.concatenate([self._rows, np.zeros_like(self._rows)])
        self._rows[n] = node_id
        self.node_ids.append(node_id)
        self.sum += vector
        self.words |= words


class Forest:
    """A conversation as topic trees.

    Parameters
    ----------
    embedder
        embeds the turns (default: the default model); ``cache`` reuses its vectors.
    decider
        where a turn goes: ``None`` (default) the learned decider shipped with chunktree
        (``learned.default_decider``), a ``LearnedDecider`` or the path of one written by
        ``chunktree train-track``, or ``"thresholds"`` for the threshold rule (``decide``), the
        baseline.
    thresholds
        the threshold rule's settings (``decide.Thresholds``); the learned decider uses its
        ``branch_margin``, ``recent`` and ``uncertain`` too.
    llm
        a ``ChatClient`` (or anything with its ``complete``): asked which topic a turn belongs
        to when the decision is uncertain (within ``thresholds.uncertain`` of a threshold; for the
        learned decider, a probability within 0.1 of its threshold). A failed
        or malformed reply falls back to the embedding decision, recorded in ``Decision.llm``.
    summary_tokens
        token cap of a node's summary.
    summariser
        ``LLMSummariser(llm)`` (or any ``f(user, assistant) -> str``) for the summaries
        instead of the extractive default; when it fails, the node gets the extractive summary and
        its failure is counted in ``summary_fallbacks``.
    """

    def __init__(self, embedder: Any = None, *, cache: EmbeddingCache | None = None, decider: Any = None,
                 thresholds: Thresholds | None = None, llm: Any = None,
                 summary_tokens: int = SUMMARY_TOKENS, summariser: Any = None) -> None:
        self.embedder = embedder or default_embedder()
        self.cache = cache
        self.thresholds = thresholds or Thresholds()
        if not isinstance(self.thresholds, Thresholds):
            raise InvalidValueError(f"thresholds must be a Thresholds; got {type(self.thresholds).__name__}")
        self.decider: LearnedDecider | None = decider_for(decider, self.embedder)
        self.judge = LLMJudge(llm) if llm is not None else None
        self.summary_tokens = positive_int(summary_tokens, "summary_tokens")
        self.summariser = summariser
        self.summary_fallbacks: list[str] = []
        self._saved: tuple[int, int] | None = None  # (turns in the file, turns in its journal) once saved
        self.nodes: list[Node] = []
        self.trees: list[_Tree] = []
        self.current: int | None = None  # the current node
        self._vectors = np.zeros((16, self.embedder.dim), np.float32)  # row = node id
        self._tree_of = np.zeros(16, np.int64)  # each node's tree
        self._parent = np.zeros(16, np.int64)  # each node's parent, -1 for a root
        self._lexical = LexicalIndex()  # each node's words (user and assistant), for BM25
        self._tokens: list[int] = []  # each node's tokens as context messages (user + assistant)

    # -- placing turns -------------------------------------------------------------------------

    def add(self, user: str, assistant: str | None = None, *, embedder: Any = None) -> Decision:
        """Place a turn and make it the current node.

        The decision uses the user text only (the reply is not known when the next context is
        built); the node's vector is that of user and assistant text together. ``embedder``: the
        forest's model reached another way for this call (a service's micro-batcher); its vectors
        must be the forest's (the same ``vectors_id``).
        """
        text(user, "user")
        if assistant is not None and not isinstance(assistant, str):
            raise InvalidValueError(f"assistant must be a string or None; got {type(assistant).__name__}")
        whole = user if not assistant else f"{user}\n{assistant}"
        vectors, _ = embed_texts([user, whole], self._embedder_for(embedder), self.cache, prompt="query")
        return self._place(user, assistant, vectors[0], vectors[1])

    def replay(self, turns: Iterable[tuple[str, str | None]]) -> Iterator[Decision]:
        """Add each ``(user, assistant)`` turn of a dialogue in order (``add``), yielding each
        decision as it is made (``track.dialogue.read_dialogue`` reads a JSONL dialogue)."""
        for user, assistant in turns:
            yield self.add(user, assistant)

    def _embedder_for(self, embedder: Any) -> Any:
        """The embedder of a call: the forest's, or one that makes the same vectors."""
        if embedder is None:
            return self.embedder
        if embedder.vectors_id != self.embedder.vectors_id:
            raise InvalidValueError(f"embedder makes the vectors of {embedder.model_id!r}; this forest holds those of "
                                    f"{self.embedder.model_id!r}", param="embedder")
        return embedder

    def _place(self, user: str, assistant: str | None, v: np.ndarray, node_vector: np.ndarray) -> Decision:
        t = self.thresholds
        current_tree = None if self.current is None else self.nodes[self.current].tree
        words = content_words(user)
        candidates, features = self._weigh(v, user, self.decider is not None)
        if self.decider is not None and candidates:
            p = self.decider.probabilities(features)
            candidates = [dataclasses.replace(c, probability=float(q)) for c, q in zip(candidates, p)]
            candidates.sort(key=lambda c: -(c.probability or 0.0))
        else:
            candidates.sort(key=lambda c: -c.fit)
        recent = set(self._path(self.current, t.recent)) if self.current is not None else set()
        if self.decider is not None:
            placement = decide_learned(candidates, current_tree, recent, t, self.decider.threshold,
                                       self.decider.return_similarity, announced(user),
                                       self._strongest(v, user, current_tree))
        else:
            placement = decide(candidates, current_tree, words, recent, t)
        llm = None
        if self.judge is not None and placement.uncertain and current_tree is not None:
            placement, llm = self._ask(user, placement, candidates, current_tree, recent)
        node = self._new_node(placement, user, assistant, node_vector)
        return Decision(placement.action, node.tree, node.id, node.parent, placement.rule, candidates, t, words, llm)

    def _weigh(self, v: np.ndarray, user: str, features: bool) -> tuple[list[Candidate], np.ndarray]:
        """The turn (vector ``v``, text ``user``) against the shortlisted trees, in tree order: how
        it fits each (``Candidate``), and the learned decider's features of each, one row a tree."""
        n, n_trees = len(self.nodes), len(self.trees)
        if not n_trees:
            return [], np.zeros((0, 0), np.float32)
        sims = self._vectors[:n] @ v
        best = np.full(n_trees, -np.inf, np.float32)
        np.maximum.at(best, self._tree_of[:n], sims)
        short = np.argsort(-best, kind="stable")[:SHORTLIST] if n_trees > SHORTLIST else np.arange(n_trees)
        current_tree = self.nodes[self.current].tree if self.current is not None else -1
        chosen = sorted(set(short.tolist()) | ({current_tree} if current_tree >= 0 else set()))
        turn_words = topic_words(user)
        connective, anaphor = turn_cues(user)
        candidates, base, means, anchors = [], [], [], []
        for tree_id in chosen:
            tree = self.trees[tree_id]
            recent = self._path(tree.anchor, self.thresholds.recent)
            rows = tree.rows
            top = int(rows[int(np.argmax(sims[rows]))])
            recent_sim = float(sims[recent].max())
            candidates.append(Candidate(tree.id, tree.anchor, recent_sim, top, float(sims[top])))
            mean = normalised(tree.sum)
            overlap = len(turn_words & tree.words) / max(1, len(turn_words))
            base.append((sims[tree.anchor], recent_sim, sims[top], mean @ v, np.log1p(len(rows)),
                         np.log1p(n - tree.last_turn), np.log1p(len(turn_words)), overlap, connective, anaphor))
            means.append(mean)
            anchors.append(self._vectors[tree.anchor])
        if not features:
            return candidates, np.zeros((len(chosen), 0), np.float32)
        is_current = np.array([tree_id == current_tree for tree_id in chosen])
        return candidates, tree_features(v, np.array(base, np.float32), is_current, np.array(means, np.float32),
                                         np.array(anchors, np.float32))

    def _strongest(self, v: np.ndarray, user: str, current_tree: int | None) -> Match | None:
        """The earlier turn that the turn (vector ``v``, text ``user``) matches best, as the context
        ranks matches (``context.match``), and the best match inside the current tree."""
        n = len(self.nodes)
        if current_tree is None or n < 2:
            return None
        strength = match(self._vectors[:n] @ v, self._lexical.scores(lexical_tokens(user)), np.ones(n, bool))
        best = int(np.argmax(strength))
        inside = strength[self._tree_of[:n] == current_tree]
        return Match(int(self._tree_of[best]), best, float(strength[best]), float(inside.max()) if inside.size else 0.0,
                     float(np.sqrt(2 * np.log(n))))

    def features(self, v: np.ndarray, user: str) -> tuple[list[Candidate], np.ndarray]:
        """How the turn (vector ``v``, text ``user``) fits each shortlisted tree, and the learned
        decider's features of it against each, one row a tree."""
        return self._weigh(v, user, features=True)

    def force(self, user: str, assistant: str | None, vector: np.ndarray, tree: int | None) -> Node:
        """Place a turn in ``tree`` at its anchor (None: a new tree), whatever a decider would say:
        for fitting a decider on dialogues with known topics (``learned.teacher_forced``)."""
        if tree is None:
            placement = Placement("new_topic", None, None, "given")
        else:
            current = None if self.current is None else self.nodes[self.current].tree
            placement = Placement("continue" if tree == current else "switch", tree, self.trees[tree].anchor, "given")
        return self._new_node(placement, user, assistant, vector)

    def _path(self, node_id: int | None, limit: int | None = None) -> list[int]:
        """Node ids from ``node_id`` up towards its root, newest first (at most ``limit``)."""
        out: list[int] = []
        while node_id is not None and (limit is None or len(out) < limit):
            out.append(node_id)
            node_id = self.nodes[node_id].parent
        return out

    def _ask(self, user: str, placement: Placement, candidates: list[Candidate], current_tree: int,
             recent: set[int]) -> tuple[Placement, dict[str, Any]]:
        topics = {tree.id: self._tree_line(tree) for tree in self.trees}
        recent_texts = [self.nodes[n].user for n in sorted(recent)]
        assert self.judge is not None
        try:
            topic, reply = self.judge.topic(user, topics, current_tree, recent_texts)
        except Exception as exc:  # any failure of the LLM falls back, recorded
            return placement, {"asked": True, "used": False, "reply": None, "fallback": f"{type(exc).__name__}: {exc}"}
        record = {"asked": True, "used": True, "reply": reply, "fallback": None}
        if topic == placement.tree or (topic is None and placement.action == "new_topic"):
            return placement, record
        if topic is None:
            return Placement("new_topic", None, None, "the LLM judged it a new topic"), record
        action = "continue" if topic == current_tree else "switch"
        return Placement(action, topic, self.trees[topic].anchor, f"the LLM chose topic {topic}"), record

    def _new_node(self, placement: Placement, user: str, assistant: str | None, vector: np.ndarray) -> Node:
        turn = len(self.nodes)
        if placement.tree is None:
            tree = _Tree(len(self.trees), vector.shape[0])
            self.trees.append(tree)
            parent, branch = None, 0
        else:
            tree = self.trees[placement.tree]
            parent = placement.parent
            siblings = self.nodes[parent].children if parent is not None else []
            if parent is not None and not siblings:
                branch = self.nodes[parent].branch
            else:
                branch, tree.branches = tree.branches, tree.branches + 1
        node = Node(turn, tree.id, branch, turn, user, assistant, self._summary(user, assistant), parent)
        if parent is not None:
            self.nodes[parent].children.append(node.id)
        self.nodes.append(node)
        self._tokens.append(int(self.embedder.count_tokens(_texts(node)).sum()))
        self._store(node, vector)
        tree.anchor, tree.last_turn = node.id, turn
        self.current = node.id
        return node

    def _store(self, node: Node, vector: np.ndarray) -> None:
        """Keep the node's vector in the forest's array and its tree's sum and words."""
        if node.id == len(self._vectors):
            self._vectors = np.concatenate([self._vectors, np.zeros_like(self._vectors)])
            self._tree_of = np.concatenate([self._tree_of, np.zeros_like(self._tree_of)])
            self._parent = np.concatenate([self._parent, np.zeros_like(self._parent)])
        self._vectors[node.id], self._tree_of[node.id] = vector, node.tree
        self._parent[node.id] = -1 if node.parent is None else node.parent
        whole = " ".join(_texts(node))
        self.trees[node.tree].append(node.id, vector, topic_words(whole))
        self._lexical.add(lexical_tokens(whole))

    # -- summaries and context -----------------------------------------------------------------

    def _summary(self, user: str, assistant: str | None) -> str:
        """The summariser's line, or the turn's most representative sentence (sharing the most
        content words with the whole turn, the first of equals); cut to ``summary_tokens``."""
        if self.summariser is not None:
            try:
                return self._cut(self.summariser(user, assistant), self.summary_tokens)
            except Exception as exc:  # any failure falls back to the extractive summary
                self.summary_fallbacks.append(f"turn {len(self.nodes)}: {type(exc).__name__}: {exc}")
        whole = user if not assistant else f"{user} {assistant}"
        sentences = [s.strip() for s in _SENTENCE.findall(whole) if s.strip()] or [whole.strip()]
        vocabulary = set(re.findall(r"\w+", whole.lower()))

        def score(sentence: str) -> int:
            return content_words(" ".join(set(re.findall(r"\w+", sentence.lower())) & vocabulary))

        best = max(sentences, key=score)
        return self._cut(" ".join(best.split()), self.summary_tokens)

    def _cut(self, s: str, tokens: int) -> str:
        enc = self.embedder.tokenizer.encode(s, add_special_tokens=False)
        if len(enc.ids) <= tokens:
            return s
        return s[:enc.offsets[tokens - 1][1]].rstrip() + " …"

    def _tree_line(self, tree: _Tree) -> str:
        first, last = self.nodes[tree.node_ids[0]].summary, self.nodes[tree.anchor].summary
        return first if first == last else f"{first} … {last}"

    def context(self, budget_tokens: int | None = None, *, query: str | None = None, embedder: Any = None) -> Context:
        """The context for the next turn, or, with ``query``, for a question about the
        conversation that is not itself a turn of it (nothing is added to the forest; ``embedder``
        embeds the query, as ``add`` takes it).

        The turns the answer most likely needs, verbatim, as user and assistant messages in the
        order of the conversation, after one system message listing every other topic and every
        branch of the current topic off its path, one line each, most recent first. Each earlier
        turn gets a relevance (``context.relevance``) from what a retriever sees, its similarity
        to the current turn (or the query) and the words they share (BM25), and what the forest
        knows: the turns beside a strong match, the current turn's path in its tree (the turns it
        follows on, nearest first), its topic, how well the turn's tree fits (the path and the
        topic only for a turn, not for a query). Without a budget the context holds the current
        turn and every turn at least ``RELEVANCE_KEEP`` relevant; under one, the current turn and
        then the most relevant turns that fit, none below ``RELEVANCE_FLOOR``; the lines take what
        is left, most recent first. The cost grows with the number of turns, not its square.
        """
        if budget_tokens is not None:
            integer(budget_tokens, "budget_tokens", 1)
        if query is not None:
            text(query, "query")
        if not self.nodes:
            return Context([], 0, [], False, [], [])
        n = len(self.nodes)
        current = self.current if query is None else None
        vector = None if query is None else embed_texts([query], self._embedder_for(embedder), self.cache,
                                                        prompt="query")[0][0]
        features = self.relevance_features(current, vector, query or "")
        p = relevance(features)
        if current is not None:
            p[current] = 1.0
        tokens = np.array(self._tokens)
        turns = sorted(choose(p, tokens, current, budget_tokens))
        used = int(tokens[turns].sum())
        budget = budget_tokens if budget_tokens is not None else sys.maxsize
        lines = self._topic_lines(set(self._path(current)) if current is not None else set(), current)
        system: list[dict[str, str]] = []
        shown = 0
        if lines:
            count = self.embedder.count_tokens
            line_costs = np.cumsum(count([_HEADER, *lines]))  # the header, then each line
            shown = int(np.searchsorted(line_costs[1:], budget - used, side="right"))
            while shown:  # a joined text may count a token more or less than its parts: check it
                content = _HEADER + "\n".join(lines[:shown])
                cost = int(count([content])[0])
                if used + cost <= budget:
                    system, used = [{"role": "system", "content": content}], used + cost
                    break
                shown -= 1
        left_out = p >= RELEVANCE_KEEP
        left_out[turns] = False
        cut = bool(left_out.any()) or shown < len(lines)
        last = n - 1 if current is None else current
        why = ["the current turn" if j == current else reason(features[j], float(p[j]), last - j + (current is None))
               for j in turns]
        messages = system + [m for j in turns for m in self._messages(j)]
        return Context(messages, used, turns, cut, [round(float(p[j]), 4) for j in turns], why)

    def relevance_features(self, current: int | None, vector: np.ndarray | None = None, query: str = "") -> np.ndarray:
        """``context.relevance_features`` of every node against node ``current`` (its vector and
        its words), or, with ``current`` None, against a query (its ``vector`` and text)."""
        n = len(self.nodes)
        if current is not None:
            vector, query = self._vectors[current], " ".join(_texts(self.nodes[current]))
        assert vector is not None
        return relevance_features(self._vectors[:n] @ vector, self._lexical.scores(lexical_tokens(query)),
                                  self._tree_of[:n], self._parent[:n], current)

    def _topic_lines(self, on_path: set[int], current: int | None) -> list[str]:
        """One line per topic other than the current node's (every topic without one), most
        recently visited first, then one per branch of the current topic that is not on the
        path, newest first."""
        cur = self.nodes[current].tree if current is not None else -1
        lines = [f"- topic {tree.id}: {self._tree_line(tree)}"
                 for tree in sorted(self.trees, key=lambda tr: -tr.last_turn) if tree.id != cur]
        if cur < 0:
            return lines
        leaves = [n for n in self.trees[cur].node_ids if not self.nodes[n].children and n not in on_path]
        return lines + [f"- branch of this topic: {self.nodes[leaf].summary}" for leaf in sorted(leaves, reverse=True)]

    def _messages(self, node_id: int) -> list[dict[str, str]]:
        n = self.nodes[node_id]
        return [{"role": "user", "content": n.user}] + ([{"role": "assistant", "content": n.assistant}]
                                                          if n.assistant else [])

    # -- what it holds, saved and loaded -------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The forest as JSON-ready data, vectors included (base64 float32, node order)."""
        vectors = self._vectors[:len(self.nodes)]
        return {"format": FORMAT, "version": VERSION, "model": self.embedder.model_id, "current": self.current,
                "thresholds": asdict(self.thresholds), "summary_tokens": self.summary_tokens,
                "trees": [{"id": t.id, "anchor": t.anchor, "last_turn": t.last_turn, "branches": t.branches,
                           "nodes": t.node_ids}
                          for t in self.trees],
                "nodes": [asdict(n) for n in self.nodes],
                "vectors": base64.b64encode(vectors.astype("<f4").tobytes()).decode()}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the forest as JSON, atomically (a temporary file renamed into place), and empty
        its journal (``save_turn``)."""
        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(f"{path}: a folder, not a forest file")
        with replacing(path) as f:
            f.write(dumps(self.to_dict()))
        journal_path(path).unlink(missing_ok=True)
        self._saved = (len(self.nodes), 0)

    def save_turn(self, path: str | os.PathLike[str]) -> None:
        """Save the newest turn of a forest saved to ``path`` before: one JSON line appended to
        its journal (``PATH.journal``) while the journal holds fewer turns than the file, else the
        whole forest rewritten (``save``). A turn costs the same however long the conversation
        (the rewrites, each after as many appended turns as the file holds, add a constant share).
        ``load`` replays the journal; a line cut short by a crash is a turn never acknowledged,
        and is dropped. A write that fails leaves the journal as it was."""
        path = Path(path)
        base, journaled = self._saved or (-1, 0)
        if not path.is_file() or base + journaled != len(self.nodes) - 1 or journaled + 1 > max(JOURNAL_MIN, base):
            self.save(path)
            return
        node = self.nodes[-1]
        tree = self.trees[node.tree]
        record = {"node": asdict(node), "tree": {"anchor": tree.anchor, "last_turn": tree.last_turn,
                                                 "branches": tree.branches},
                  "vector": base64.b64encode(self._vectors[node.id].astype("<f4").tobytes()).decode()}
        journal = journal_path(path)
        if journal.is_symlink():  # never appended through: the whole file is written, and the link removed
            self.save(path)
            return
        size = journal.stat().st_size if journal.exists() else 0
        try:
            # O_NOFOLLOW: a link planted after the check above fails here instead of being written through
            fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(dumps(record) + "\n")
        except OSError:
            with contextlib.suppress(OSError):
                if not journal.is_symlink():
                    os.truncate(journal, size)
            raise
        self._saved = (base, journaled + 1)

    @classmethod
    def load(cls, path: str | os.PathLike[str], embedder: Any = None, **kwargs: Any) -> Forest:
        """Read a forest written by ``save`` (and ``save_turn``: its journal replayed); a file that
        is not one, or one from another model or format version, raises ``ForestFileError``
        naming it."""
        path = Path(path)
        try:
            data = json_loads(path.read_text(encoding="utf-8"))
            base = len(data["nodes"]) if isinstance(data, dict) and isinstance(data.get("nodes"), list) else 0
            journaled, clean = replay(data, journal_path(path))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:  # UnicodeDecodeError: a ValueError
            raise ForestFileError(f"{path}: not a readable forest file ({type(exc).__name__}: {exc})") from None
        try:
            forest = cls.from_dict(data, embedder, **kwargs)
        except ForestFileError as exc:
            raise ForestFileError(f"{path}: {exc}") from None
        # a journal cut short by a crash is not appended to: the next save_turn rewrites the file
        forest._saved = (base, journaled) if clean else None
        return forest

    @classmethod
    def from_dict(cls, data: Any, embedder: Any = None, **kwargs: Any) -> Forest:
        """A forest from ``to_dict``'s data, every field checked first (``check_document``)."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ForestFileError(f"not a {FORMAT} document")
        if data.get("version") != VERSION:
            raise ForestFileError(f"format version {data.get('version')!r}; this chunktree reads version {VERSION}")
        for key, kind in (("model", str), ("thresholds", dict), ("summary_tokens", int)):
            if not isinstance(data.get(key), kind):
                raise ForestFileError(f"{key}: missing or not a {kind.__name__} ({data.get(key)!r:.60})")
        if not 1 <= data["summary_tokens"] <= 2**31:
            raise ForestFileError(f"summary_tokens: {data['summary_tokens']!r:.60}; must be from 1 to 2**31")
        try:
            thresholds = Thresholds(**data["thresholds"])
        except (TypeError, ValueError) as exc:
            raise ForestFileError(f"thresholds: {exc}") from None
        forest = cls(embedder, thresholds=thresholds, summary_tokens=data["summary_tokens"], **kwargs)
        if data["model"] != forest.embedder.model_id:
            raise ForestFileError(f"its vectors come from the model {data['model']!r}, not {forest.embedder.model_id!r}")
        nodes, vectors = check_document(data, forest.embedder.dim)
        forest.nodes = nodes
        forest.trees = [_Tree(i, forest.embedder.dim) for i in range(len(data["trees"]))]
        for node in nodes:
            forest._store(node, vectors[node.id])
        for tree, t in zip(forest.trees, data["trees"]):
            tree.anchor, tree.last_turn, tree.branches = t["anchor"], t["last_turn"], t["branches"]
        forest.current = data["current"]
        texts = [_texts(n) for n in nodes]
        counts = forest.embedder.count_tokens([t for pair in texts for t in pair]).tolist()
        ends = np.cumsum([len(pair) for pair in texts]).tolist()
        forest._tokens = [int(sum(counts[end - len(pair):end])) for pair, end in zip(texts, ends)]
        return forest

    def show(self) -> str:
        """The forest as an indented tree, one line per turn: its user text (cut to 24 tokens)."""
        lines = []
        for tree in self.trees:
            n_turns = len(tree.node_ids)
            lines.append(f"topic {tree.id} ({n_turns} turn{'' if n_turns == 1 else 's'})")
            stack = [(tree.node_ids[0], 1)]
            while stack:
                node_id, depth = stack.pop()
                n = self.nodes[node_id]
                mark = " <- current" if node_id == self.current else ""
                # a chain stays at one depth; only a second child (a branch) indents
                lines.append(f"{'  ' * depth}#{n.id} [branch {n.branch}] {self._cut(' '.join(n.user.split()), 24)}{mark}")
                for i, child in reversed(list(enumerate(n.children))):
                    stack.append((child, depth + (1 if i > 0 else 0)))
        return "\n".join(lines)
