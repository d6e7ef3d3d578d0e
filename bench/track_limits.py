"""What the topic decider can and cannot tell from a turn's text: stitched question sets, turn by
turn, and hand-written chats.

    python bench/track_limits.py   # needs ../shared/data (CoQA, SQuAD-Shifts, LoCoMo)

On 30 dialogues of 40 turns stitched from the second half of the CoQA stories and of the
SQuAD-Shifts articles (``chunktree eval-track``'s), with the shipped decider:

1. The turns' text, by kind: a turn that continues its story, opens a new one or returns to an
   earlier one. Its content words, the share with at most one, and the share that shares a
   content word with the earlier turns (questions and answers) of its own story.
2. The ceiling of the decider's evidence. Every turn is placed where its label says (teacher
   forcing), so the forest is always right so far. A turn is judged a topic change when the
   most probable tree is not the current one, or no tree reaches t. Boundary F1 is taken at the
   decider's threshold and at the best t. It is set against the boundary F1 of the forest deciding
   on its own.
3. At returns with two or more earlier trees: how often the story's own tree is the most probable
   earlier tree, and how often it is the earlier tree the turn fits best (``Candidate.fit``).

4. ``examples/chats.jsonl``: hand-written chats of four stretches with a return, topics labelled;
   the shipped decider against the threshold rule (``evaluate.evaluate_chats``).
5. The answer as evidence: two deciders fitted on ``bench/train_track_decider.py``'s training
   split with its settings, one on the questions (as shipped) and one on each question and its
   answer as one text; each decides the stitched dialogues above on what it was fitted on.
   Boundary F1 and return accuracy of both (the fits take a few minutes).
6. The ceiling of merging trees after the fact, on 30 dialogues of 80 turns from the same second
   halves: the forest's assignment and return accuracy as it decides, and again with every tree
   merged into the first tree of its majority story: an oracle that merges exactly the trees
   that share a majority story, what a merge rule could at best reach without moving turns. And
   the return accuracy of the forest's decision when every earlier turn was placed as labelled:
   how far the returns' misses come from the turn itself and how far from earlier misplacements.
7. Whether the subjects of a long conversation come as stretches, on the LoCoMo half in
   ``../shared/data/dialogue/locomo_half.json``: how often two evidence utterances of one question
   from different sittings share a group (``locomo.together``; two turns drawn at random give the
   chance), for the forest's trees, for K-means clusters of the turns themselves (``select``'s
   clustering of the turn vectors, K = 10, 20 and 40) and for K-means clusters of stretches of
   ``STRETCH`` consecutive turns (each stretch's mean vector, K = 10 and 20; a grouping that keeps
   stretches whole, as the forest's trees do).
8. Whether trees that follow those subjects would make the context hold more: the relevance model
   fitted as ``bench/fit_context.py`` fits it and validated the same way (each LoCoMo conversation
   left out of the fit in turn), once with the forest's trees and once with each utterance's tree
   replaced by its K-means cluster (``SUBJECTS`` clusters of the turn vectors, the question in the
   cluster of the nearest centre). Every other feature is computed as the forest computes it.

Writes ``bench/results/track_limits.json``.
"""

import sys
from pathlib import Path

import fit_context
import numpy as np
from record import title, write
from train_track_decider import training_data

from chunktree import Embedder
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.engine.select import select
from chunktree.track.data import LabelledDialogue, Turn, load_labelled, load_stories, stitch
from chunktree.track.decide import Thresholds, content_words, topic_words
from chunktree.track.evaluate import embed_turns, evaluate_chats, format_chats, run_forest, score_dialogue
from chunktree.track.forest import Forest
from chunktree.track.learned import DEFAULT_THRESHOLD, default_decider
from chunktree.track.locomo import _copy, conversation_forest, load_locomo, together
from chunktree.track.train import DEFAULT_HIDDEN, DEFAULT_L2, fit

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETS = {"coqa": DATA / "coqa_test.json", "squad": DATA / "squad_shifts_new_wiki_v1.0.json"}
CHATS = ROOT / "examples" / "chats.jsonl"
LOCOMO = DATA / "dialogue" / "locomo_half.json"
DIALOGUES, LENGTH = 30, 40
GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
CLUSTERS, STRETCH = (10, 20, 40), 8
SUBJECTS = 10


def kind(turns: list, i: int) -> str:
    story = turns[i].story
    if story == turns[i - 1].story:
        return "continues"
    return "returns" if any(t.story == story for t in turns[:i]) else "opens"


def text_of_turns(dialogues: list[list]) -> dict[str, dict[str, float]]:
    rows: dict[str, list[tuple[int, bool, bool]]] = {"continues": [], "opens": [], "returns": []}
    for turns in dialogues:
        for i in range(1, len(turns)):
            words = topic_words(turns[i].user)
            own = set().union(*(topic_words(f"{t.user} {t.assistant}") for t in turns[:i] if t.story == turns[i].story))
            rows[kind(turns, i)].append((len(words), content_words(turns[i].user) <= 1, bool(words & own)))
    return {k: {"turns": len(v), "content_words": float(np.mean([r[0] for r in v])),
                "at_most_one_content_word": float(np.mean([r[1] for r in v])),
                "shares_a_word_with_its_story": float(np.mean([r[2] for r in v]))} for k, v in rows.items()}


def forced_ceiling(dialogues: list[list], embedded: list, embedder: Embedder, decider) -> dict[str, object]:
    """Every turn placed as its label says (teacher forcing). The boundary F1 for each t of ``GRID``
    and the decider's threshold, a turn counting as a topic change where the most probable tree is
    not the current one or no tree reaches t; and at returns with two or more earlier trees, how
    often the most probable and the best-fitting earlier tree are the story's own."""
    changes, stays, best_p, by_p, by_fit = [], [], [], [], []
    for turns, (u, v, _) in zip(dialogues, embedded):
        forest, tree_of = Forest(embedder, decider=decider), {}
        for i, turn in enumerate(turns):
            gold = tree_of.get(turn.story)
            if forest.trees:
                candidates, x = forest.features(u[i], turn.user)
                p = decider.probabilities(x)
                current = forest.nodes[forest.current].tree
                top = int(np.argmax(p))
                changes.append(turn.story != turns[i - 1].story)
                stays.append(candidates[top].tree == current)
                best_p.append(float(p[top]))
                earlier = [(c, q) for c, q in zip(candidates, p) if c.tree != current]
                if kind(turns, i) == "returns" and len(earlier) > 1:
                    by_p.append(max(earlier, key=lambda e: e[1])[0].tree == gold)
                    by_fit.append(max(earlier, key=lambda e: e[0].fit)[0].tree == gold)
            tree_of[turn.story] = forest.force(turn.user, turn.assistant, v[i], gold).tree
    gold_b, stay, p = np.array(changes), np.array(stays), np.array(best_p)
    f1 = {}
    for t in sorted({*GRID, decider.threshold}):
        pred = ~stay | (p < t)
        tp = int((gold_b & pred).sum())
        precision, recall = tp / max(1, pred.sum()), tp / max(1, gold_b.sum())
        f1[t] = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"boundary_f1_by_threshold": f1, "returns_with_two_or_more_earlier_trees": len(by_p),
            "own_tree_is_most_probable": float(np.mean(by_p)), "own_tree_fits_best": float(np.mean(by_fit))}


def with_answer(user: str, assistant: str | None) -> str:
    """A question and its answer as one text."""
    return f"{user}\n{assistant}" if assistant else user


def scores(dialogues: list[list[Turn]], embedded: list, embedder: Embedder, decider) -> dict[str, float]:
    """Mean boundary F1 and return accuracy of the forest deciding on its own (``embedded``: the
    dialogues' ``embed_turns``)."""
    online = [score_dialogue(turns, run_forest(turns, u, v, embedder, Thresholds(), decider)[0])
              for turns, (u, v, _) in zip(dialogues, embedded)]
    return {"boundary_f1": float(np.mean([m["boundary_f1"] for m in online])),
            "return_accuracy": float(np.nanmean([m["return_accuracy"] for m in online]))}


def answer_as_evidence(held_out: dict[str, tuple[list[list[Turn]], list]], embedder: Embedder,
                       cache: EmbeddingCache) -> dict[str, dict[str, dict[str, float]]]:
    """Section 5: by set (its dialogues and their ``embed_turns``), the scores of the decider
    fitted on questions and of the one fitted on question and answer together, each deciding on
    what it was fitted on."""
    train, _, _ = training_data()
    merged = [LabelledDialogue(d.id, [(with_answer(u, a), None, topic) for u, a, topic in d.turns], d.source)
              for d in train]
    settings = {"hidden": DEFAULT_HIDDEN, "l2": DEFAULT_L2, "threshold": DEFAULT_THRESHOLD}
    on_questions = fit(train, embedder, cache, **settings)
    on_answers = fit(merged, embedder, cache, **settings)
    out = {}
    for name, (dialogues, embedded) in held_out.items():
        answered = [[Turn(with_answer(t.user, t.assistant), "", t.story) for t in turns] for turns in dialogues]
        out[name] = {"question": scores(dialogues, embedded, embedder, on_questions),
                     "question_and_answer": scores(answered, embed_turns(answered, embedder, cache, False), embedder,
                                                   on_answers)}
    return out


MERGE_LENGTH = 80


def oracle_merge(turns: list[Turn], trees: list[int]) -> list[int]:
    """Each turn's tree after merging every tree into the first tree whose majority story is its own."""
    stories, made = np.array([t.story for t in turns]), np.array(trees)
    majority = {}
    for tree in sorted(set(trees)):
        values, counts = np.unique(stories[made == tree], return_counts=True)
        majority[tree] = int(values[np.argmax(counts)])
    first: dict[int, int] = {}
    for tree in sorted(majority):
        first.setdefault(majority[tree], tree)
    return [first[majority[tree]] for tree in trees]


def forced_returns(turns: list[Turn], u: np.ndarray, v: np.ndarray, embedder: Embedder, decider) -> list[bool]:
    """At each return, whether the forest sends the turn to its story's tree when every earlier
    turn was placed as its label says (the forest's whole decision: the decider, its return rule
    and the strong-match rule)."""
    forest, tree_of, resumed = Forest(embedder, decider=decider), {}, []
    for i, turn in enumerate(turns):
        gold = tree_of.get(turn.story)
        if kind(turns, i) == "returns":
            resumed.append(_copy(forest)._place(turn.user, turn.assistant, u[i], v[i]).tree == gold)
        tree_of[turn.story] = forest.force(turn.user, turn.assistant, v[i], gold).tree
    return resumed


def merge_ceiling(stories: list, embedder: Embedder, cache: EmbeddingCache, decider) -> dict[str, dict[str, float]]:
    """Section 6: assignment, return accuracy and trees per topic as the forest decides, and after
    ``oracle_merge``; and the return accuracy with every earlier turn placed as labelled."""
    dialogues = [stitch(stories, MERGE_LENGTH, i) for i in range(DIALOGUES)]
    rows: dict[str, list[dict[str, float]]] = {"as decided": [], "oracle merge": []}
    resumed: list[float] = []  # per dialogue, as score_dialogue averages
    for turns, (u, v, _) in zip(dialogues, embed_turns(dialogues, embedder, cache, False)):
        trees = run_forest(turns, u, v, embedder, Thresholds(), decider)[0]
        rows["as decided"].append(score_dialogue(turns, trees))
        rows["oracle merge"].append(score_dialogue(turns, oracle_merge(turns, trees)))
        forced = forced_returns(turns, u, v, embedder, decider)
        resumed.append(float(np.mean(forced)) if forced else float("nan"))
    out = {name: {k: float(np.nanmean([m[k] for m in ms])) for k in ("assignment", "return_accuracy", "trees_per_topic")}
           for name, ms in rows.items()}
    out["earlier turns placed as labelled"] = {"return_accuracy": float(np.nanmean(resumed))}
    return out


def locomo_subjects(embedder: Embedder, cache: EmbeddingCache, decider) -> dict[str, dict[str, dict[str, float]]]:
    """Per LoCoMo conversation and grouping (the forest's trees, clusters of turns, clusters of
    stretches), ``locomo.together`` and the number of groups."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for conversation in load_locomo(LOCOMO):
        vectors = embed_texts(conversation.turns, embedder, cache, prompt="query")[0]
        forest = conversation_forest(conversation, vectors, embedder, cache, decider)
        groups = {"the forest's trees": np.array([node.tree for node in forest.nodes])}
        for k in CLUSTERS:
            groups[f"turns, K = {k}"] = select(vectors, k).labels
        stretch = np.arange(len(vectors)) // STRETCH
        means = np.array([vectors[stretch == s].mean(axis=0) for s in range(stretch[-1] + 1)])
        for k in CLUSTERS[:2]:
            groups[f"stretches of {STRETCH} turns, K = {k}"] = select(means, k).labels[stretch]
        out[conversation.id] = {name: {"groups": float(len(np.unique(g))), **together(g, conversation)}
                                for name, g in groups.items()}
    return out


def subjects_as_trees(embedder: Embedder, cache: EmbeddingCache) -> dict[str, dict[str, dict[str, float]]]:
    """LoCoMo evidence recall by budget, each conversation left out of the relevance fit, with the
    forest's trees and with subject clusters as the trees (``fit_context``'s data and fit)."""
    short = list(fit_context.short_pairs(embedder, cache).values())
    conversations = load_locomo(LOCOMO)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for trees, clusters in (("the forest's trees", 0), (f"K-means clusters, K = {SUBJECTS}", SUBJECTS)):
        locomo = {c.id: fit_context.locomo_pairs(c, embedder, cache, clusters) for c in conversations}
        recall = fit_context.left_out_recall(short, locomo, conversations, embedder)
        out[trees] = {way: {str(b): float(np.mean(v)) for b, v in by.items()} for way, by in recall.items()}
    return out


def main() -> int:
    for path in (*SETS.values(), CHATS, LOCOMO):
        if not path.is_file():
            print(f"{path} not found", file=sys.stderr)
            return 1
    embedder, cache, decider = Embedder(), EmbeddingCache(), default_decider()
    results, lines, held, merged = {}, [], {}, {}
    for name, path in SETS.items():
        stories = load_stories(path)
        held_out = stories[len(stories) // 2:]
        dialogues = [stitch(held_out, LENGTH, i) for i in range(DIALOGUES)]
        embedded = embed_turns(dialogues, embedder, cache, False)
        held[name] = (dialogues, embedded)
        merged[name] = merge_ceiling(held_out, embedder, cache, decider)
        text = text_of_turns(dialogues)
        forced = forced_ceiling(dialogues, embedded, embedder, decider)
        on_own = scores(dialogues, embedded, embedder, decider)["boundary_f1"]
        results[name] = {"text": text, "teacher_forced": forced, "boundary_f1_deciding_alone": on_own}
        f1 = forced["boundary_f1_by_threshold"]
        best = max(f1, key=f1.get)
        lines += [f"{path.name}, {DIALOGUES} dialogues of {LENGTH} turns from the second half:",
                  "| turn | turns | content words | at most one | shares a word with its story |", "|---|---|---|---|---|",
                  *(f"| {k} | {r['turns']} | {r['content_words']:.2f} | {r['at_most_one_content_word']:.2f} | "
                    f"{r['shares_a_word_with_its_story']:.2f} |" for k, r in text.items()),
                  f"boundary F1 with every earlier turn placed as labelled: {f1[decider.threshold]:.3f} at the "
                  f"decider's threshold {decider.threshold}, {f1[best]:.3f} at the best ({best}); deciding on its own: "
                  f"{on_own:.3f}",
                  f"returns with two or more earlier trees ({forced['returns_with_two_or_more_earlier_trees']}): the "
                  f"story's own tree is the most probable earlier one {forced['own_tree_is_most_probable']:.3f}, the "
                  f"best-fitting earlier one {forced['own_tree_fits_best']:.3f}"]
    chats = evaluate_chats(load_labelled(CHATS), embedder=embedder, cache=cache)
    results["chats"] = chats
    lines += [f"{CHATS.relative_to(ROOT)}:", *format_chats(chats).splitlines()]
    results["answer_as_evidence"] = answers = answer_as_evidence(held, embedder, cache)
    lines += ["Deciders fitted on the training split of bench/train_track_decider.py, deciding the stitched "
              "dialogues above:", "| set | decides on | boundary F1 | return accuracy |", "|---|---|---|---|",
              *(f"| {name} | {on.replace('_', ' ')} | {m['boundary_f1']:.3f} | {m['return_accuracy']:.3f} |"
                for name, by in answers.items() for on, m in by.items())]
    results["merge_ceiling"] = merged
    lines += [f"{DIALOGUES} dialogues of {MERGE_LENGTH} turns from the second half, as the forest decides and with every tree "
              "merged into its majority story's first tree (oracle merge); and the return accuracy when every earlier turn "
              "was placed as labelled:",
              "| set | trees | assignment | return accuracy | trees per topic |", "|---|---|---|---|---|",
              *(f"| {name} | {how} | " + " | ".join(f"{m[k]:.3f}" if k in m else "-" for k in
                                                   ("assignment", "return_accuracy", "trees_per_topic")) + " |"
                for name, by in merged.items() for how, m in by.items())]
    results["locomo_subjects"] = subjects = locomo_subjects(embedder, cache, decider)
    names = list(next(iter(subjects.values())))
    lines += ["LoCoMo half: how often two evidence utterances of one question from different sittings share a group, "
              "against two turns drawn at random (chance), per conversation (groups: evidence together / chance):",
              f"| grouping | {' | '.join(subjects)} |", "|---|" + "---|" * len(subjects),
              *(f"| {name} | " + " | ".join(f"{int(by[name]['groups'])}: {by[name]['evidence_together']:.3f} / "
                                            f"{by[name]['chance_together']:.3f}" for by in subjects.values()) + " |"
                for name in names)]
    results["subjects_as_trees"] = as_trees = subjects_as_trees(embedder, cache)
    lines += ["LoCoMo half: evidence recall, each conversation left out of the relevance fit, with the forest's trees and "
              "with subject clusters as the trees:",
              "| trees | asked | " + " | ".join(f"{b:,} tokens" for b in fit_context.BUDGETS) + " |",
              "|---|---|" + "---|" * len(fit_context.BUDGETS),
              *(f"| {trees} | {'as the next turn' if way == 'turn' else 'context(query=)'} | "
                + " | ".join(f"{v:.3f}" for v in by.values()) + " |" for trees, ways in as_trees.items()
                for way, by in ways.items())]
    print("\n".join(lines))
    write("track_limits", title(__doc__, "track_limits"), "python bench/track_limits.py", lines, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
