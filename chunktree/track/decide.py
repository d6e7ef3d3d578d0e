"""Where a new turn goes in the forest: continue, branch, switch or a new topic.

The default decider uses embeddings only; it approximates the LLM judge of Context-Agent (arXiv
2604.05552), which asks a model about the topic and the branch at every turn. For each tree it
measures how well the new turn fits it: ``anchor`` = the highest similarity to the last
``recent`` turns on the path that ends at the tree's anchor (for the current tree the current
node, for another tree the node it was left at), ``best`` = the highest similarity to any node
of the tree, ``fit`` = the larger of the two. Then, in this order:

1. ``first turn``: the forest is empty, so a new topic.
2. ``no topic of its own``: a turn with at most ``dependent_words`` content words ("and what
   colour was it?") stays in the current tree, unless another tree fits it by ``return_margin``
   more than the current one (a short return: "what did Disney do then?").
3. ``new topic``: no tree fits by ``new_topic`` or more.
4. ``switch``: the best-fitting tree is another one, by ``switch_margin`` more than the current.
5. otherwise the current tree.
Inside the chosen tree, the turn continues at the anchor, or branches from the best-matching
node when that node is off the recent path and fits by ``branch_margin`` more than the anchor.

The thresholds were calibrated on stitched CoQA dialogues (``chunktree eval-track --calibrate``,
on stories the evaluation does not use).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from chunktree.checks import InvalidValueError, json_loads, number, positive_int
from chunktree.engine.lexical import FUNCTION_WORDS

ACTIONS = ("continue", "branch", "switch", "new_topic")

_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")


def content_words(text: str) -> int:
    """Words of ``text`` that are not function words (English; numbers do not count)."""
    return sum(1 for w in _WORD.findall(text.lower()) if w not in FUNCTION_WORDS)


def topic_words(text: str) -> set[str]:
    """The content words of ``text``, lower case, a plural's final ``s`` dropped ("folds" and
    "fold" meet)."""
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in _WORD.findall(text.lower()) if w not in FUNCTION_WORDS}


_CONNECTIVES = frozenset("and also so but then or plus".split())
_ANAPHORS = frozenset("it its they them their theirs this that these those he him his she her hers there".split())


def turn_cues(text: str) -> tuple[float, float]:
    """(whether the turn opens with a connective such as "and" or "what about", whether it refers
    back with a pronoun such as "it" or "they"): signs of a follow-up."""
    words = _WORD.findall(text.lower())
    opens = bool(words) and (words[0] in _CONNECTIVES or words[:2] in (["what", "about"], ["how", "about"]))
    return float(opens), float(any(w in _ANAPHORS for w in words))


_SWITCH = re.compile(r"^\W*(?:switching (?:gears|topics?|subjects?)|chang(?:e|ing) (?:of )?(?:the )?(?:subject|topic)"
                     r"|(?:a |an )?(?:different|new|unrelated|separate|other|another) (?:question|topic|subject)"
                     r"|unrelated|on (?:a |an )?(?:different|other|another|unrelated|separate) (?:note|topic|subject)"
                     r"|on another note|by the way|btw|something (?:else|different)|off[- ]topic|moving on)\b", re.I)
_BACK = re.compile(r"^\W*(?:(?:going|coming|getting|let'?s go|let me go) )?back to\b|^\W*returning to\b"
                   r"|^\W*(?:about|regarding|as for) [^.?!:;]{1,60}?\bagain\b", re.I)


def announced(text: str) -> str | None:
    """"return" when the turn says it goes back to an earlier subject ("Back to the bread: ...",
    "About the car again: ..."), "switch" when it announces a change of subject ("Switching gears:
    ...", "Different question: ..."), else None."""
    if _BACK.search(text):
        return "return"
    return "switch" if _SWITCH.search(text) else None


@dataclass(frozen=True)
class Thresholds:
    """The embedding decider's settings; see the module notes for the rule each one sets."""

    # Chosen by `chunktree eval-track --calibrate` (30 dialogues of 40 turns from the first half of
    # the CoQA stories): the best mean of boundary F1 (0.445) and return accuracy (0.853) of a
    # 300-setting grid. branch_margin was not calibrated (CoQA has no refinements).
    new_topic: float = 0.20
    switch_margin: float = 0.0
    return_margin: float = 0.10
    branch_margin: float = 0.15
    dependent_words: int = 1
    recent: int = 3
    uncertain: float = 0.03  # the LLM judge, when there is one, is asked within this of a threshold

    def __post_init__(self) -> None:
        for name in ("new_topic", "switch_margin", "return_margin", "branch_margin", "uncertain"):
            number(getattr(self, name), name, -1.0, 2.0)
        if not isinstance(self.dependent_words, int) or isinstance(self.dependent_words, bool) \
                or self.dependent_words < 0:
            raise InvalidValueError(f"dependent_words must be an int >= 0; got {self.dependent_words!r}")
        positive_int(self.recent, "recent")


@dataclass(frozen=True)
class Candidate:
    """How well the new turn fits one tree."""

    tree: int
    anchor: int
    anchor_similarity: float
    best: int
    best_similarity: float
    probability: float | None = None  # the learned decider's, when it decides

    @property
    def fit(self) -> float:
        return max(self.anchor_similarity, self.best_similarity)


@dataclass
class Decision:
    """Where a turn went and why.

    Attributes
    ----------
    action
        one of ``ACTIONS``.
    tree, node
        the tree and the new node's id; ``parent`` its parent (None for a new tree).
    rule
        the rule that fired (the module notes list them).
    candidates
        the fit of the trees the turn was weighed against (the ``SHORTLIST`` best-fitting ones and
        the current one), best first.
    thresholds
        the settings in force.
    content_words
        the turn's content words (rule 2).
    llm
        None when no LLM was asked; else what it said or why its answer was not used
        (``{"asked": True, "used": bool, "reply": ..., "fallback": reason or None}``).
    """

    action: str
    tree: int
    node: int
    parent: int | None
    rule: str
    candidates: list[Candidate] = field(default_factory=list)
    thresholds: Thresholds = field(default_factory=Thresholds)
    content_words: int = 0
    llm: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "tree": self.tree, "node": self.node, "parent": self.parent,
                "rule": self.rule, "content_words": self.content_words,
                "candidates": [{**asdict(c), "fit": c.fit} for c in self.candidates],
                "thresholds": asdict(self.thresholds), "llm": self.llm}


@dataclass(frozen=True)
class Placement:
    """A decision before the node exists: the action, the tree (None: a new one), the parent."""

    action: str
    tree: int | None
    parent: int | None
    rule: str
    uncertain: bool = False


def _inside(c: Candidate, action: str, rule: str, uncertain: bool, current: int, path_recent: set[int],
            t: Thresholds) -> Placement:
    """Where in tree ``c`` the turn goes: at its anchor, or a branch from its best-matching node
    when that node is off the recent path and fits by ``branch_margin`` more than the anchor."""
    recent = path_recent if c.tree == current else set()
    if c.best not in recent and c.best != c.anchor and c.best_similarity - c.anchor_similarity >= t.branch_margin:
        return Placement("branch" if c.tree == current else action, c.tree, c.best, rule + ", at its best node", uncertain)
    return Placement(action, c.tree, c.anchor, rule, uncertain)


# The learned decider asks the LLM judge, when there is one, within this of its threshold.
LEARNED_UNCERTAIN = 0.1
# A strong match: when the network keeps a turn in the current tree, an earlier turn of another tree
# whose match with it (its similarity z-score plus half its BM25 z-score among all earlier turns,
# ``context.match``) passes what chance gives among as many turns (``Match.chance``) by STRONG_MATCH,
# and the current tree's best match by STRONG_MARGIN, takes it to that tree if the network gives
# that tree at least STRONG_PROBABILITY. Chosen by bench/fit_strong_match.py on the first half of
# the stitched stories and the training part of DialSeg711 and TIAGE.
STRONG_MATCH = 1.0
STRONG_MARGIN = 1.0
STRONG_PROBABILITY = 0.1


@dataclass(frozen=True)
class Match:
    """The new turn's strongest match among the earlier turns: its tree and node, how strong it is,
    the strongest match inside the current tree, and the strongest expected by chance
    (``sqrt(2 ln n)`` for n earlier turns, the usual maximum of n standard normal values)."""

    tree: int
    node: int
    strength: float
    current: float
    chance: float


def decide_learned(candidates: list[Candidate], current: int | None, path_recent: set[int], t: Thresholds,
                   threshold: float, return_similarity: float | None, announce: str | None = None,
                   match: Match | None = None) -> Placement:
    """``_network_rule``, then a strong match (``match``, ``STRONG_MATCH``) may take a turn that the
    network keeps in the current tree to the tree of that match: words and meaning shared with one
    earlier turn name a subject more surely than a likeness to a whole tree ("When should I pick
    the tomatoes?" after a talk about guitars)."""
    placement = _network_rule(candidates, current, path_recent, t, threshold, return_similarity, announce)
    if (match is None or current is None or announce is not None or placement.tree != current
            or match.tree == current or match.strength < match.chance + STRONG_MATCH
            or match.strength - match.current < STRONG_MARGIN):
        return placement
    target = next((c for c in candidates if c.tree == match.tree), None)
    if target is None or (target.probability or 0.0) < STRONG_PROBABILITY:
        return placement
    why = (f"turn {match.node} of topic {match.tree} matches it strongly ({match.strength:.1f}; the current "
           f"topic's best {match.current:.1f}; p {target.probability:.2f})")
    return _inside(target, "switch", why, False, current, path_recent, t)


def _network_rule(candidates: list[Candidate], current: int | None, path_recent: set[int], t: Thresholds,
                  threshold: float, return_similarity: float | None, announce: str | None = None) -> Placement:
    """The learned rule: ``candidates`` sorted by probability, most probable first. The most
    probable tree takes the turn (continue, or switch to it). When no tree reaches ``threshold``,
    the turn returns to the other tree that fits it best if that fit reaches ``return_similarity``,
    else it opens a new topic. A turn that announces a change of subject (``announced``) goes to
    another tree only if one reaches ``threshold``, else to a new topic; one that announces a
    return goes to the other tree it fits best (``Candidate.fit``), which names the right earlier
    tree more often than the most probable one does (``bench/track_limits.py``).
    Inside the tree, as the threshold rule places it."""
    if current is None or not candidates:
        return Placement("new_topic", None, None, "first turn")
    others = [c for c in candidates if c.tree != current]
    if announce == "return" and others:
        c = max(others, key=lambda c: c.fit)
        return _inside(c, "switch", f"it announces a return; topic {c.tree} is the earlier one it fits best "
                                    f"({c.fit:.2f})", False, current, path_recent, t)
    pool = others if announce else candidates
    top = pool[0] if pool else None
    p = float(top.probability or 0.0) if top is not None else 0.0
    uncertain = announce is None and abs(p - threshold) < LEARNED_UNCERTAIN
    said = "it announces a change of subject; " if announce else ""
    if top is None or p < threshold:
        back = max(others, key=lambda c: c.fit, default=None)
        if announce is None and return_similarity is not None and back is not None and back.fit >= return_similarity:
            return _inside(back, "switch", f"{said}no tree is likely enough (best p {p:.2f}), but topic {back.tree} "
                                           f"fits as a return ({back.fit:.2f})", uncertain, current, path_recent, t)
        return Placement("new_topic", None, None, f"{said}no tree is likely enough (best p {p:.2f})", uncertain)
    if top.tree == current:
        return _inside(top, "continue", f"the current tree is the most likely (p {p:.2f})", uncertain, current,
                       path_recent, t)
    return _inside(top, "switch", f"{said}another tree is the most likely (p {p:.2f})", uncertain, current,
                   path_recent, t)


def decide(candidates: list[Candidate], current: int | None, words: int, path_recent: set[int],
           t: Thresholds) -> Placement:
    """The embedding rule. ``candidates``: one per tree; ``current``: the current tree;
    ``path_recent``: the node ids of the current path's recent turns."""
    if current is None or not candidates:
        return Placement("new_topic", None, None, "first turn")
    by_tree = {c.tree: c for c in candidates}
    cur = by_tree[current]
    others = [c for c in candidates if c.tree != current]
    best_other = max(others, key=lambda c: c.fit, default=None)
    near = t.uncertain

    def inside(c: Candidate, action: str, rule: str, uncertain: bool) -> Placement:
        return _inside(c, action, rule, uncertain, current, path_recent, t)

    if words <= t.dependent_words:
        if best_other is not None and best_other.fit - cur.fit >= t.return_margin:
            return inside(best_other, "switch", "no topic of its own, but another tree fits far better",
                          abs(best_other.fit - cur.fit - t.return_margin) < near)
        uncertain = best_other is not None and abs(best_other.fit - cur.fit - t.return_margin) < near
        return Placement("continue", current, cur.anchor, "no topic of its own", uncertain)
    top = max(candidates, key=lambda c: c.fit)
    if top.fit < t.new_topic:
        return Placement("new_topic", None, None, "no tree fits", abs(top.fit - t.new_topic) < near)
    if top.tree != current and top.fit - cur.fit >= t.switch_margin:
        return inside(top, "switch", "another tree fits better",
                      abs(top.fit - cur.fit - t.switch_margin) < near or abs(top.fit - t.new_topic) < near)
    uncertain = abs(top.fit - t.new_topic) < near or (
        best_other is not None and abs(best_other.fit - cur.fit - t.switch_margin) < near)
    return inside(cur, "continue", "the current tree fits", uncertain)


JUDGE_PROMPT = """You keep track of the topics of a conversation. Topics so far (id: summary):
{topics}
The current topic is {current}. Its latest turns:
{recent}

New user turn: {turn}

Does the new turn continue the current topic, return to another listed topic, or start a new one?
Reply with JSON only: {{"topic": <a listed id, or "new">}}"""


class LLMJudge:
    """Asks an OpenAI-compatible chat model (``ChatClient``) which topic an uncertain turn belongs
    to. Only the topic is asked; where in the tree it goes follows the embedding rule."""

    def __init__(self, llm: Any, *, max_tokens: int = 32) -> None:
        self.llm, self.max_tokens = llm, max_tokens

    def topic(self, turn: str, topics: dict[int, str], current: int, recent: list[str]) -> tuple[int | None, str]:
        """(tree id or None for a new topic, the raw reply). Raises ValueError on a reply that is
        not one of the choices, and the client's error when the call fails."""
        prompt = JUDGE_PROMPT.format(topics="\n".join(f"{i}: {s}" for i, s in topics.items()), current=current,
                                     recent="\n".join(f"- {r}" for r in recent), turn=turn)
        reply = self.llm.complete([{"role": "user", "content": prompt}], max_tokens=self.max_tokens).text
        match = re.search(r"\{.*\}", reply, re.S)
        if not match:
            raise ValueError(f"no JSON object in the reply {reply[:80]!r}")
        value = json_loads(match.group(0)).get("topic")
        if value == "new":
            return None, reply
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value not in topics:
            raise ValueError(f"topic {value!r} is not one of {sorted(topics)} or 'new'")
        return value, reply

