"""``chunktree eval-track``: the topic forest on dialogues with a known topic structure.

Dialogues are stitched from CoQA (conversational questions about a source story, with answers)
or SQuAD (questions about the paragraphs of an article): stretches of 2-6 turns about different
stories, interleaved, with returns to earlier stories (A A A B B A C C B ...), seeded. The gold
topic of a turn is its story. Stories are split in two halves by position in the file:
``--calibrate`` searches the decider's thresholds on the first, the evaluation uses the second.

Measured per dialogue, then averaged with 95% bootstrap intervals over dialogues:
- topic assignment: turns whose tree maps to their story (trees mapped to stories by majority);
- boundaries: precision, recall and F1 of topic changes (a turn in another tree than the last);
  Pk and WindowDiff (k = half the mean gold stretch);
- returns: a return to an earlier story resumes the tree that story's last turn is in
  (``return_accuracy``); ``return_to_earlier_tree``: the share of returns that go instead to
  another tree holding earlier turns of that story (the story was split over two trees);
- context after each turn: its tokens against the full history's, and the share of the current
  story's earlier turns it holds verbatim (recall); with the baselines full history, the last N
  turns, and the top-k earlier turns by similarity;
- the context frontier: the same recall when every method gets the same budget, 25%, 50% and 75%
  of the full history's tokens (the last turns that fit; the most similar turns that fit; the
  forest's ``context(budget)``), and the forest's recall within the tokens of the last-N window;
  beside them the ceiling, the most any context within the budget can hold (the topic's shortest
  earlier turns first), which tells how much room there is above a method.

Labelled chats (``evaluate_chats``: a topic per turn, each chat run as written) get the same topic
metrics and the share of turns placed as labelled, for the decider and the threshold rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from chunktree.checks import InvalidValueError, integer
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.engine.evaluate.stats import bootstrap
from chunktree.progress import Progress, tracked
from chunktree.track.data import LabelledDialogue, Turn, labelled_turns, load_stories, stitch
from chunktree.track.decide import Thresholds
from chunktree.track.forest import Forest

LENGTHS = (20, 40, 80)
BASELINE_TURNS = 8  # the last-N and top-k baselines keep this many earlier turns
FRACTIONS = (0.25, 0.5, 0.75)  # the context frontier's budgets, shares of the full history's tokens


def _segmentation_errors(gold: np.ndarray, pred: np.ndarray, k: int) -> tuple[float, float]:
    """Pk and WindowDiff of the boundary sequences (1 where a turn starts a new segment)."""
    n = len(gold)
    if n <= k:
        return 0.0, 0.0
    g, p = np.cumsum(gold), np.cumsum(pred)
    gk, pk = g[k:] - g[:-k], p[k:] - p[:-k]
    return float(np.mean((gk > 0) != (pk > 0))), float(np.mean(gk != pk))


def assignment(stories: np.ndarray, trees: np.ndarray) -> float:
    """The share of turns whose tree is their topic's tree, each topic matched to at most one tree
    and each tree to at most one topic so that the most turns match (the Hungarian method): a
    topic split over two trees, or two topics sharing one, loses the turns of all but one."""
    topic_ids, t = np.unique(stories, return_inverse=True)
    tree_ids, r = np.unique(trees, return_inverse=True)
    counts = np.zeros((len(topic_ids), len(tree_ids)), np.int64)
    np.add.at(counts, (t, r), 1)
    rows, cols = linear_sum_assignment(-counts)
    return float(counts[rows, cols].sum() / len(stories))


def score_dialogue(turns: list[Turn], trees: list[int]) -> dict[str, float]:
    """The topic metrics of one dialogue: assignment (``assignment``), trees per topic, purity,
    boundaries, Pk and WindowDiff, returns."""
    stories = np.array([t.story for t in turns])
    pred = np.array(trees)
    majority = sum(int(np.unique(stories[pred == tree], return_counts=True)[1].max()) for tree in set(trees))
    out: dict[str, float] = {"assignment": assignment(stories, pred),
                             "trees_per_topic": float(np.mean([len(set(pred[stories == s])) for s in set(stories)])),
                             "purity": majority / len(turns)}
    gold_b = np.r_[0, stories[1:] != stories[:-1]].astype(int)
    pred_b = np.r_[0, pred[1:] != pred[:-1]].astype(int)
    tp = int((gold_b & pred_b).sum())
    precision = tp / pred_b.sum() if pred_b.sum() else 1.0
    recall = tp / gold_b.sum() if gold_b.sum() else 1.0
    out.update(boundary_precision=precision, boundary_recall=recall,
               boundary_f1=2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    k = max(1, round(len(turns) / (gold_b.sum() + 1) / 2))
    out["pk"], out["windowdiff"] = _segmentation_errors(gold_b, pred_b, k)
    returns: list[bool] = []
    earlier: list[bool] = []
    last_turn: dict[int, int] = {}
    for i, s in enumerate(stories):
        if i and s != stories[i - 1] and s in last_turn:
            resumed = bool(pred[i] == pred[last_turn[s]])
            returns.append(resumed)
            earlier.append(not resumed and bool(np.any(pred[:i][stories[:i] == s] == pred[i])))
        last_turn[s] = i
    out["return_accuracy"] = float(np.mean(returns)) if returns else float("nan")
    out["return_to_earlier_tree"] = float(np.mean(earlier)) if earlier else float("nan")
    return out


def _fill(order: Iterable[int], tokens: np.ndarray, budget: int, contiguous: bool = False) -> set[int]:
    """The turns of ``order`` taken in turn while they fit ``budget`` (``contiguous``: stop at the
    first that does not; else skip it)."""
    kept: set[int] = set()
    used = 0
    for j in order:
        if used + int(tokens[j]) > budget:
            if contiguous:
                break
            continue
        kept.add(int(j))
        used += int(tokens[j])
    return kept


def context_budgets(tokens: np.ndarray) -> Any:
    """``budgets(i)``: the named token budgets of the context after turn i (``run_forest``): the
    full context (None), each of ``FRACTIONS`` of the full history (``"25"``, ``"50"``,
    ``"75"``), the last-N window's tokens (``"last_n"``)."""
    full = np.cumsum(tokens)

    def budgets(i: int) -> dict[str, int | None]:
        window = int(tokens[max(0, i - BASELINE_TURNS):i + 1].sum())
        return {"full": None, **{f"{round(100 * f)}": max(1, int(f * full[i])) for f in FRACTIONS}, "last_n": window}

    return budgets


FRONTIER_BUDGETS = (*(f"{round(100 * f)}" for f in FRACTIONS), "last_n")
FRONTIER_METHODS = ("forest", "top_k", "top_k_neighbours", "last_n")


def with_neighbours(order: list[int], last: int) -> list[int]:
    """``order`` with each turn followed at once by the turns just before and after it (those not
    yet in it, within 0..``last``): top-k retrieval that also brings each hit's neighbours."""
    out: list[int] = []
    seen: set[int] = set()
    for j in order:
        for k in (j, j - 1, j + 1):
            if 0 <= k <= last and k not in seen:
                seen.add(k)
                out.append(k)
    return out


def score_context(turns: list[Turn], contexts: list[dict[str, tuple[list[int], int]]], vectors: np.ndarray,
                  tokens: np.ndarray) -> dict[str, float]:
    """The context metrics of one dialogue, after each turn that has earlier turns of its topic:
    the share of those the context holds verbatim (recall) and its tokens against the full
    history's. ``contexts[i]``: the forest's context after turn i at each budget of
    ``context_budgets`` (turn indices held verbatim, tokens); ``vectors``: the user texts'
    vectors, what top-k retrieval ranks by; ``tokens[i]``: turn i's tokens (user and assistant).

    Without a budget: the forest's context, the last ``BASELINE_TURNS`` turns, the top
    ``BASELINE_TURNS`` by similarity, the full history. At each ``FRONTIER_BUDGETS`` budget
    (``{method}_at_{budget}``): the forest, top-k (the most similar turns that fit), top-k with
    neighbours (each hit followed by the turns beside it) and last-N (the newest turns that fit);
    and the forest's recall minus each baseline's (``forest_minus_{method}_at_{budget}``); and the
    ceiling (``ceiling_at_{budget}``): the most any context within the budget can hold (the current
    turn when it fits, as every method takes it first, then the topic's shortest earlier turns)."""
    stories = np.array([t.story for t in turns])
    full = np.cumsum(tokens)
    rows: dict[str, list[tuple[float, float]]] = {}
    budgets = context_budgets(tokens)
    for i in range(1, len(turns)):
        earlier = set(np.flatnonzero(stories[:i] == stories[i]).tolist())
        if not earlier:
            continue
        newest = list(range(i, -1, -1))
        similar = [i, *np.argsort(-(vectors[:i] @ vectors[i]), kind="stable").tolist()]
        neighbours = with_neighbours(similar, i)
        shortest = [i, *sorted(earlier, key=lambda j: (int(tokens[j]), j))]
        held: dict[str, tuple[set[int], int | None]] = {
            "forest": (set(contexts[i]["full"][0]), contexts[i]["full"][1]),
            "last_n": (set(newest[:BASELINE_TURNS + 1]), None),
            "top_k": (set(similar[:BASELINE_TURNS + 1]), None),
            "full": (set(newest), None),
        }
        at = budgets(i)
        for name in FRONTIER_BUDGETS:
            budget = at[name]
            held[f"forest_at_{name}"] = (set(contexts[i][name][0]), contexts[i][name][1])
            held[f"top_k_at_{name}"] = (_fill(similar, tokens, budget, contiguous=False), None)
            held[f"top_k_neighbours_at_{name}"] = (_fill(neighbours, tokens, budget, contiguous=False), None)
            held[f"last_n_at_{name}"] = (_fill(newest, tokens, budget, contiguous=True), None)
            held[f"ceiling_at_{name}"] = (_fill(shortest, tokens, budget), None)
        for name, (kept, cost) in held.items():
            cost = int(tokens[sorted(kept)].sum()) if cost is None else cost
            rows.setdefault(name, []).append((cost / full[i], len(kept & earlier) / len(earlier)))
    out: dict[str, float] = {}
    for name, values in rows.items():
        arr = np.array(values, dtype=np.float64)
        out[f"{name}_tokens"] = float(arr[:, 0].mean())
        out[f"{name}_recall"] = float(arr[:, 1].mean())
    for budget in FRONTIER_BUDGETS if rows else ():  # paired by dialogue
        for method in FRONTIER_METHODS[1:]:
            out[f"forest_minus_{method}_at_{budget}"] = (out[f"forest_at_{budget}_recall"]
                                                         - out[f"{method}_at_{budget}_recall"])
    return out


def embed_turns(dialogues: list[list[Turn]], embedder: Any, cache: EmbeddingCache | None,
                progress: Progress) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each dialogue's user vectors, node vectors (user and assistant text together) and tokens per turn."""
    texts = [t for d in dialogues for turn in d for t in (turn.user, f"{turn.user}\n{turn.assistant}")]
    vectors, _ = embed_texts(texts, embedder, cache, progress=progress, prompt="query")
    counts = embedder.count_tokens([t for d in dialogues for turn in d for t in (turn.user, turn.assistant)])
    out, start = [], 0
    for d in dialogues:
        n = len(d)
        v, c = vectors[2 * start:2 * (start + n)], counts[2 * start:2 * (start + n)]
        out.append((v[0::2], v[1::2], c[0::2] + c[1::2]))
        start += n
    return out


def run_forest(turns: list[Turn], user_vectors: np.ndarray, node_vectors: np.ndarray, embedder: Any,
               thresholds: Thresholds, decider: Any = None, budgets: Any = None
               ) -> tuple[list[int], list[dict[str, tuple[list[int], int]]]]:
    """Place every turn (with precomputed vectors); each turn's tree and, with ``budgets`` (see
    ``context_budgets``), the context after it at each budget: (turns held, tokens) by name.
    ``decider`` as ``Forest`` takes it."""
    forest = Forest(embedder, thresholds=thresholds, decider=decider)
    trees, contexts = [], []
    for i, turn in enumerate(turns):
        decision = forest._place(turn.user, turn.assistant, user_vectors[i], node_vectors[i])
        trees.append(decision.tree)
        if budgets is not None:
            made = {name: forest.context(b) for name, b in budgets(i).items()}
            contexts.append({name: (c.turns, c.tokens) for name, c in made.items()})
    return trees, contexts


def calibrate(path: str | Path, *, embedder: Any, cache: EmbeddingCache | None = None, dialogues: int = 30,
              length: int = 40, seed: int = 0, progress: Progress = False) -> dict[str, Any]:
    """Grid search of the thresholds on the first half of the stories: the setting with the best
    mean of boundary F1 and return accuracy."""
    stories = load_stories(path)
    half = stories[:len(stories) // 2]
    made = stitched_dialogues(half, (length,), dialogues, seed)[length]
    embedded = embed_turns(made, embedder, cache, progress)
    grid = list(itertools.product((0.15, 0.2, 0.25, 0.3, 0.35), (0.0, 0.05, 0.1, 0.15, 0.2),
                                  (0.05, 0.1, 0.2, 0.3), (0, 1, 2)))
    results = []
    for new_topic, switch, ret, words in tracked(grid, len(grid), "calibrate", "setting", enabled=progress):
        t = Thresholds(new_topic=new_topic, switch_margin=switch, return_margin=ret, dependent_words=words)
        f1, acc = [], []
        for turns, (u, v, _) in zip(made, embedded):
            trees, _ = run_forest(turns, u, v, embedder, t, decider="thresholds")
            m = score_dialogue(turns, trees)
            f1.append(m["boundary_f1"])
            acc.append(m["return_accuracy"])
        results.append({"new_topic": new_topic, "switch_margin": switch, "return_margin": ret,
                        "dependent_words": words, "boundary_f1": float(np.mean(f1)),
                        "return_accuracy": float(np.nanmean(acc))})
    results.sort(key=lambda r: -(r["boundary_f1"] + r["return_accuracy"]))
    return {"dialogues": dialogues, "length": length, "stories": len(half), "best": results[0], "top": results[:10]}


MIN_INTERVAL = 5  # fewer dialogues than this get means without intervals


def summarise(rows: list[dict[str, float]], seed: int) -> dict[str, dict[str, float]]:
    """Each metric's mean over ``rows`` (one per dialogue; NaN, a metric a dialogue lacks, left
    out) with its 95% bootstrap interval."""
    return {key: bootstrap([r[key] for r in rows if not np.isnan(r[key])], seed=seed) for key in rows[0]}


def evaluate(path: str | Path, *, embedder: Any, cache: EmbeddingCache | None = None,
             thresholds: Thresholds | None = None, dialogues: int = 30, lengths: tuple[int, ...] = LENGTHS,
             seed: int = 0, progress: Progress = False, decider: Any = None) -> dict[str, Any]:
    """The metrics per dialogue length, on the second half of the stories (``decider`` as
    ``Forest`` takes it; ``thresholds`` are the threshold rule's)."""
    integer(dialogues, "dialogues", 1)
    for n in lengths:
        integer(n, "length", 2)
    thresholds = thresholds or Thresholds()
    stories = load_stories(path)
    held_out = stories[len(stories) // 2:]
    report: dict[str, Any] = {"decider": "thresholds" if decider == "thresholds" else str(decider or "shipped"),
                              "thresholds": thresholds.__dict__, "stories": len(held_out), "dialogues": dialogues,
                              "by_length": {}}
    for length, made in stitched_dialogues(held_out, lengths, dialogues, seed).items():
        rows = []
        for turns, (u, v, c) in tracked(list(zip(made, embed_turns(made, embedder, cache, progress))),
                                        len(made), f"eval-track {length} turns", "dialogue", enabled=progress):
            trees, contexts = run_forest(turns, u, v, embedder, thresholds, decider, context_budgets(c))
            rows.append({**score_dialogue(turns, trees), **score_context(turns, contexts, u, c)})
        report["by_length"][length] = summarise(rows, seed)
    return report


def stitched_dialogues(stories: list[list[tuple[str, str]]], lengths: tuple[int, ...], dialogues: int,
                       seed: int) -> dict[int, list[list[Turn]]]:
    """``dialogues`` dialogues of each length stitched from ``stories``, each from a seed of its own:
    with one seed, a longer dialogue would begin with a shorter one's turns."""
    return {length: [stitch(stories, length, seed * 1000 + k * dialogues + i) for i in range(dialogues)]
            for k, length in enumerate(lengths)}


def placed_as_labelled(topics: list[Any], trees: list[int]) -> float:
    """The share of turns placed as the labels say: the i-th tree the forest opens stands for the
    i-th topic the labels name, and a turn counts when its tree stands for its topic."""
    gold = {topic: i for i, topic in enumerate(dict.fromkeys(topics))}
    made = {tree: i for i, tree in enumerate(dict.fromkeys(trees))}
    return float(np.mean([gold[topic] == made[tree] for topic, tree in zip(topics, trees)]))


def evaluate_chats(dialogues: list[LabelledDialogue], *, embedder: Any, cache: EmbeddingCache | None = None,
                   decider: Any = None, seed: int = 0, progress: Progress = False) -> dict[str, Any]:
    """Chats with a topic per turn, each as written: for the forest (``decider`` as ``Forest``
    takes it) and the threshold rule, the share of turns placed as labelled, topic assignment,
    boundaries, Pk, WindowDiff, return accuracy and returns to an earlier tree; the forest's
    context frontier (``score_context``); each averaged over chats with 95% bootstrap intervals;
    and each chat's topics and the forest's trees, turn by turn."""
    if not dialogues:
        raise InvalidValueError("no chats to evaluate")
    made = [labelled_turns(d) for d in dialogues]
    embedded = embed_turns(made, embedder, cache, progress)
    rows: dict[str, list[dict[str, float]]] = {"forest": [], "thresholds": []}
    frontier, chats = [], []
    for d, turns, (u, v, c) in tracked(list(zip(dialogues, made, embedded)), len(made), "eval-track", "chat",
                                       enabled=progress):
        topics = [t.story for t in turns]
        for name, chosen in (("forest", decider), ("thresholds", "thresholds")):
            budgets = context_budgets(c) if name == "forest" else None
            trees, contexts = run_forest(turns, u, v, embedder, Thresholds(), chosen, budgets)
            rows[name].append({"placed_as_labelled": placed_as_labelled(topics, trees), **score_dialogue(turns, trees)})
            if name == "forest":
                chats.append({"chat": d.id, "topics": topics, "trees": trees})
                frontier.append(score_context(turns, contexts, u, c))
    methods = {name: summarise(values, seed) for name, values in rows.items()}
    scored = [f for f in frontier if f]  # a chat without a topic that comes back has nothing to score
    return {"chats": len(made), "turns": sum(len(t) for t in made), "methods": methods, "by_chat": chats,
            "context": summarise(scored, seed) if scored else {}}


def cell(m: dict[str, float]) -> str:
    """A mean with its interval, or alone where too few dialogues (``MIN_INTERVAL``) stand behind it."""
    if not m["n"]:
        return "-"
    return f"{m['mean']:.3f} [{m['lo']:.3f}, {m['hi']:.3f}]" if m["n"] >= MIN_INTERVAL else f"{m['mean']:.3f}"


def interval_note(n: int, what: str) -> list[str]:
    """The line that says why there are no intervals, when ``n`` is below ``MIN_INTERVAL``."""
    if n >= MIN_INTERVAL:
        return []
    return [f"{n} {what}: means only; 95% intervals need at least {MIN_INTERVAL} {what.rstrip('s')}s"]


ASSIGNMENT_NOTE = ("assignment: the share of turns in their topic's tree, each topic matched to at most one tree and "
                   "each tree to at most one topic (a topic split over two trees loses the turns of the smaller part); "
                   "trees_per_topic: how many trees a topic's turns spread over; purity: the share of turns of their "
                   "tree's most common topic (splitting a topic does not lower it); return_accuracy: the share of "
                   "returns that resume the tree the topic was left in; return_to_earlier_tree: the share that go to "
                   "another tree holding earlier turns of their topic (the topic was split over two trees)")
BUDGET_NAMES = {"25": "25% of the history", "50": "50% of the history", "75": "75% of the history",
                "last_n": f"the last-{BASELINE_TURNS} window's tokens"}
METHOD_NAMES = {"forest": "forest", "top_k": "top-k", "top_k_neighbours": "top-k + neighbours", "last_n": "last-N"}


def format_frontier(m: dict[str, dict[str, float]]) -> list[str]:
    """The context frontier as a Markdown table: at each budget, the share of the current topic's
    earlier turns each method holds, and the forest's paired difference from each baseline."""
    if not m:
        return ["context: no turn returns to a topic with earlier turns, nothing to score"]
    head = ([METHOD_NAMES[k] for k in FRONTIER_METHODS] + ["ceiling"]
            + [f"forest - {METHOD_NAMES[k]}" for k in FRONTIER_METHODS[1:]])
    lines = ["context frontier: the share of the current topic's earlier turns the context holds verbatim, every "
             "method at the same token budget; ceiling: the most any context within the budget can hold",
             f"| budget | {' | '.join(head)} |", "|---|" + "---|" * len(head)]
    for b in FRONTIER_BUDGETS:
        cells = [cell(m[f"{k}_at_{b}_recall"]) for k in (*FRONTIER_METHODS, "ceiling")]
        cells += [cell(m[f"forest_minus_{k}_at_{b}"]) for k in FRONTIER_METHODS[1:]]
        lines.append(f"| {BUDGET_NAMES[b]} | {' | '.join(cells)} |")
    lines.append(f"without a budget: the forest holds {cell(m['forest_recall'])} for {cell(m['forest_tokens'])} of the "
                 f"history's tokens; top-{BASELINE_TURNS} {cell(m['top_k_recall'])} for {cell(m['top_k_tokens'])}; "
                 f"last-{BASELINE_TURNS} {cell(m['last_n_recall'])} for {cell(m['last_n_tokens'])}")
    return lines


def format_chats(report: dict[str, Any]) -> str:
    """The chat evaluation as Markdown tables: one row per method, the forest's context frontier,
    then each chat's topics and trees."""
    keys = ("placed_as_labelled", "assignment", "boundary_f1", "return_accuracy", "return_to_earlier_tree", "pk")
    lines = [f"{report['chats']} chats, {report['turns']} turns", *interval_note(report["chats"], "chats"),
             f"| method | {' | '.join(keys)} |", "|---|" + "---|" * len(keys)]
    for name, m in report["methods"].items():
        lines.append(f"| {name} | {' | '.join(cell(m[k]) for k in keys)} |")
    lines += [ASSIGNMENT_NOTE, *format_frontier(report["context"]),
              "each chat, turn by turn (topics as labelled; the forest's trees):"]
    for chat in report["by_chat"]:
        lines.append(f"  {chat['chat']}: topics {' '.join(map(str, chat['topics']))}; trees {' '.join(map(str, chat['trees']))}")
    return "\n".join(lines)


TOPIC_KEYS = ("assignment", "trees_per_topic", "purity", "boundary_precision", "boundary_recall", "boundary_f1", "pk",
              "windowdiff", "return_accuracy", "return_to_earlier_tree")


def format_report(report: dict[str, Any]) -> str:
    """The evaluation as Markdown: the topic metrics, one column per dialogue length, then the
    context frontier at each length."""
    lengths = list(report["by_length"])
    lines = [f"{report['dialogues']} dialogues of each length, stitched from {report['stories']} stories; decider "
             f"{report['decider']}; means over dialogues [95% bootstrap intervals]",
             *interval_note(report["dialogues"], "dialogues"),
             f"| metric | {' | '.join(f'{n} turns' for n in lengths)} |", "|---|" + "---|" * len(lengths)]
    for key in TOPIC_KEYS:
        lines.append(f"| {key} | {' | '.join(cell(report['by_length'][n][key]) for n in lengths)} |")
    lines.append(ASSIGNMENT_NOTE)
    for n in lengths:
        lines += ["", f"{n} turns:", *format_frontier(report["by_length"][n])]
    return "\n".join(lines)
