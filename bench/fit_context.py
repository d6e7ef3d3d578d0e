"""Fit the weights of the context's relevance model (``chunktree/track/context.py``) on a mix of
conversation kinds, and validate them on conversations kept out of the fit.

    python bench/fit_context.py   # needs ../shared/data (CoQA, SQuAD-Shifts, DialSeg711, TIAGE, LoCoMo)

Pairs (an earlier turn, the turn or question that needs the context), each with the
``RELEVANCE_FEATURES`` and a label, from two kinds of conversation that weigh the same in the fit,
short dialogues (four sources, a quarter each) and long ones (LoCoMo):

- stitched CoQA and SQuAD-Shifts dialogues (60 each of 20, 40 and 80 turns, each from a seed of
  its own, from the first half of the stories, the half ``chunktree eval-track`` does not use),
  placed turn by turn by the shipped decider: every earlier turn, labelled 1 when it is of the
  turn's story;
- DialSeg711 (the even half's first 70%, the training part of ``train_track_decider.py``) and
  TIAGE train: every earlier utterance, labelled 1 when it is of the utterance's segment;
- the LoCoMo half in ``../shared/data/dialogue/locomo_half.json``: every turn of a conversation
  against each question, labelled 1 when it holds the question's evidence; once with the question
  added as the next turn (as ``eval-track --data locomo`` measures ``forest``) and once as a query
  that is not a turn (``forest_query``).

Validation, leave one conversation out: for each LoCoMo conversation, the model fitted on the
other sources and the other four conversations gives the evidence recall of its questions at each
budget (both ways of asking), over all questions and by question kind. The stitched dialogues
are validated by ``bench/eval_track.py`` on the second half of the stories. Then the fit on
everything gives the weights to paste into ``RELEVANCE_WEIGHTS`` and ``RELEVANCE_BIAS`` (features
on their own scale).

Writes ``bench/results/fit_context.json``.
"""

import sys
from pathlib import Path

import numpy as np
from record import title, write

from chunktree import Embedder
from chunktree.engine.cache import EmbeddingCache
from chunktree.engine.lexical import lexical_tokens
from chunktree.engine.select import select
from chunktree.track.context import RELEVANCE_FEATURES, RELEVANCE_FLOOR, RELEVANCE_KEEP, relevance_features
from chunktree.track.data import LabelledDialogue, Turn, labelled_turns, load_labelled, load_stories
from chunktree.track.evaluate import _fill, embed_turns, stitched_dialogues
from chunktree.track.forest import Forest
from chunktree.track.locomo import KINDS, LocomoConversation, _copy, conversation_forest, load_locomo
from chunktree.track.train import fit_weights

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
STITCHED = {"coqa": DATA / "coqa_test.json", "squad": DATA / "squad_shifts_new_wiki_v1.0.json"}
DIALSEG, TIAGE = DATA / "dialogue" / "dialseg711_even.json", DATA / "dialogue" / "tiage_train_dev.json"
LOCOMO = DATA / "dialogue" / "locomo_half.json"
LENGTHS, DIALOGUES, L2 = (20, 40, 80), 60, 1.0
BUDGETS = (256, 512, 1024, 2048, 4096)
WAYS = ("turn", "query")  # the question added as a turn, or asked with context(query=)

Pairs = tuple[np.ndarray, np.ndarray]


def dialogue_pairs(dialogues: list[list[Turn]], embedder: Embedder, cache: EmbeddingCache) -> Pairs:
    """Every (earlier turn, turn) pair of the dialogues, placed by the shipped decider; label: same story."""
    xs, ys = [], []
    for turns, (u, v, _) in zip(dialogues, embed_turns(dialogues, embedder, cache, False)):
        forest = Forest(embedder)
        story = np.array([t.story for t in turns])
        for i, turn in enumerate(turns):
            forest._place(turn.user, turn.assistant or None, u[i], v[i])
            if i:
                xs.append(forest.relevance_features(i)[:i])
                ys.append(story[:i] == story[i])
    return np.concatenate(xs), np.concatenate(ys).astype(np.float64)


def stitched(path: Path) -> list[list[Turn]]:
    stories = load_stories(path)
    made = stitched_dialogues(stories[:len(stories) // 2], LENGTHS, DIALOGUES, seed=0)
    return [turns for length in LENGTHS for turns in made[length]]


def segmented(path: Path) -> list[list[Turn]]:
    """The training part of a segmentation file, as ``bench/train_track_decider.py`` splits it."""
    labelled: list[LabelledDialogue] = load_labelled(path)
    if path == TIAGE:
        import json

        sets = [d["set"] for d in json.loads(path.read_text())]
        labelled = [d for d, s in zip(labelled, sets) if s == "train"]
    else:
        labelled = labelled[:round(len(labelled) * 0.7)]
    return [labelled_turns(d) for d in labelled]


def locomo_pairs(conversation: LocomoConversation, embedder: Embedder, cache: EmbeddingCache, clusters: int = 0
                 ) -> dict[str, tuple[list[np.ndarray], list[np.ndarray]]]:
    """Per way of asking, each question's features of every turn and its evidence labels. With
    ``clusters``, each utterance's tree is replaced by its cluster (``select``'s K-means of the turn
    vectors) and each question's by the cluster of the nearest centre (``bench/track_limits.py``
    asks whether trees that follow subjects would help)."""
    from chunktree.engine.embedding import embed_texts

    turns, questions = conversation.turns, conversation.questions
    vectors, _ = embed_texts(turns + [q.text for q in questions], embedder, cache)
    forest = conversation_forest(conversation, vectors[:len(turns)], embedder)
    n = len(turns)
    if clusters:
        labels = select(vectors[:n], clusters).labels
        centres = np.array([vectors[:n][labels == g].mean(axis=0) for g in range(int(labels.max()) + 1)])
    out: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {way: ([], []) for way in WAYS}
    for q, v in zip(questions, vectors[n:]):
        y = np.zeros(n)
        y[list(q.evidence)] = 1.0
        asked = _copy(forest)
        asked._place(q.text, None, v, v)
        if clusters:
            words = lexical_tokens(q.text)
            as_turn = relevance_features(asked._vectors[:n + 1] @ v, asked._lexical.scores(words),
                                         np.append(labels, int(np.argmax(centres @ v))), asked._parent[:n + 1], n)[:n]
            as_query = relevance_features(vectors[:n] @ v, forest._lexical.scores(words), labels, forest._parent[:n], None)
        else:
            as_turn, as_query = asked.relevance_features(n)[:n], forest.relevance_features(None, v, q.text)
        for way, x in (("turn", as_turn), ("query", as_query)):
            out[way][0].append(x)
            out[way][1].append(y)
    return out


def fit(short: list[Pairs], long: Pairs) -> tuple[np.ndarray, float]:
    """Weights and bias on the features' own scale: the short dialogues' sources weigh the same
    as each other, and together as much as the long conversations."""
    parts = [*short, long]
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    shares = [1.0 / len(short)] * len(short) + [1.0]
    weights = np.concatenate([np.full(len(p[1]), share / len(p[1])) for p, share in zip(parts, shares)])
    w, mean, scale = fit_weights(np.c_[np.ones(len(y)), x], y, L2, weights)
    return w[1:] / scale[1:], float(w[0] - np.sum(w[1:] * mean[1:] / scale[1:]))


def recall_at(x: np.ndarray, y: np.ndarray, tokens: np.ndarray, weights: np.ndarray, bias: float, budget: int) -> float:
    p = x @ weights + bias
    held = _fill(np.lexsort((-np.arange(len(p)), -p)), tokens, budget)
    return len(held & set(np.flatnonzero(y).tolist())) / float(y.sum())


def short_pairs(embedder: Embedder, cache: EmbeddingCache) -> dict[str, Pairs]:
    """The short dialogues' pairs by source: stitched CoQA and SQuAD-Shifts, DialSeg711, TIAGE."""
    sources: dict[str, Pairs] = {name: dialogue_pairs(stitched(path), embedder, cache) for name, path in STITCHED.items()}
    for path in (DIALSEG, TIAGE):
        sources[path.stem] = dialogue_pairs(segmented(path), embedder, cache)
    return sources


def locomo_part(locomo: dict[str, dict[str, tuple[list[np.ndarray], list[np.ndarray]]]], ids: list[str]) -> Pairs:
    """The pairs of the conversations ``ids``, both ways of asking."""
    xs = [x for i in ids for way in WAYS for x in locomo[i][way][0]]
    ys = [y for i in ids for way in WAYS for y in locomo[i][way][1]]
    return np.concatenate(xs), np.concatenate(ys)


def left_out_recall(short: list[Pairs], locomo: dict[str, dict[str, tuple[list[np.ndarray], list[np.ndarray]]]],
                    conversations: list[LocomoConversation], embedder: Embedder) -> dict[str, dict[int, list[float]]]:
    """Per way of asking and budget, the evidence recall of every question (conversation by
    conversation, in order), each conversation ranked by the model fitted without it."""
    ids = [c.id for c in conversations]
    recall: dict[str, dict[int, list[float]]] = {way: {b: [] for b in BUDGETS} for way in WAYS}
    for held, conversation in zip(ids, conversations):
        weights, bias = fit(short, locomo_part(locomo, [i for i in ids if i != held]))
        tokens = embedder.count_tokens(conversation.turns)
        for way in WAYS:
            for x, y in zip(*locomo[held][way]):
                for b in BUDGETS:
                    recall[way][b].append(recall_at(x, y, tokens, weights, bias, b))
    return recall


def main() -> int:
    for path in (*STITCHED.values(), DIALSEG, TIAGE, LOCOMO):
        if not path.is_file():
            print(f"{path} not found", file=sys.stderr)
            return 1
    embedder, cache = Embedder(), EmbeddingCache()
    sources = short_pairs(embedder, cache)
    conversations = load_locomo(LOCOMO)
    locomo = {c.id: locomo_pairs(c, embedder, cache) for c in conversations}
    ids = [c.id for c in conversations]
    validation = left_out_recall(list(sources.values()), locomo, conversations, embedder)
    weights, bias = fit(list(sources.values()), locomo_part(locomo, ids))
    kinds = np.array([q.kind for c in conversations for q in c.questions])  # the order of validation's values
    by_kind = {way: {kind: {b: float(np.mean(np.array(validation[way][b])[kinds == kind])) for b in BUDGETS}
                     for kind in KINDS.values()} for way in WAYS}

    def kept(part: Pairs, level: float) -> str:
        """The share of the part's positive pairs and of its other pairs at or above ``level``."""
        p = part[0] @ weights + bias >= np.log(level / (1 - level))
        return f"{p[part[1] > 0].mean():.3f} / {p[part[1] == 0].mean():.3f}"

    parts = {**sources, "LoCoMo": locomo_part(locomo, ids)}
    lines = [f"pairs: {', '.join(f'{name} {len(p[1]):,} ({int(p[1].sum()):,} positive)' for name, p in sources.items())}, "
             f"LoCoMo {sum(len(y) for i in ids for y in locomo[i]['turn'][1]):,} per way of asking "
             f"({sum(len(locomo[i]['turn'][1]) for i in ids)} questions, {len(ids)} conversations)",
             "LoCoMo evidence recall, each conversation's questions ranked by the model fitted without it:",
             "| asked | " + " | ".join(f"{b:,} tokens" for b in BUDGETS) + " |", "|---|" + "---|" * len(BUDGETS),
             *(f"| {'as the next turn' if way == 'turn' else 'context(query=)'} | "
               + " | ".join(f"{np.mean(validation[way][b]):.3f}" for b in BUDGETS) + " |" for way in WAYS),
             "the same by question kind:",
             "| kind | asked | " + " | ".join(f"{b:,} tokens" for b in BUDGETS) + " |", "|---|---|" + "---|" * len(BUDGETS),
             *(f"| {kind} | {'as the next turn' if way == 'turn' else 'context(query=)'} | "
               + " | ".join(f"{by_kind[way][kind][b]:.3f}" for b in BUDGETS) + " |" for kind in KINDS.values() for way in WAYS),
             "fitted on everything (paste into chunktree/track/context.py):",
             "RELEVANCE_WEIGHTS = np.array([" + ", ".join(f"{v:.3f}" for v in weights) + "])  # "
             + ", ".join(RELEVANCE_FEATURES),
             f"RELEVANCE_BIAS = {bias:.3f}",
             f"with these weights, the share of needed / other pairs at or above the floor ({RELEVANCE_FLOOR}) and the "
             f"level kept without a budget ({RELEVANCE_KEEP}):",
             *(f"- {name}: {kept(part, RELEVANCE_FLOOR)} and {kept(part, RELEVANCE_KEEP)}" for name, part in parts.items())]
    print("\n".join(lines))
    write("fit_context", title(__doc__, "fit_context"), "python bench/fit_context.py", lines,
          {"features": list(RELEVANCE_FEATURES), "weights": weights.tolist(), "bias": bias, "l2": L2,
           "validation": {way: {str(b): float(np.mean(v)) for b, v in by.items()} for way, by in validation.items()},
           "validation_by_kind": {way: {kind: {str(b): v for b, v in by.items()} for kind, by in kinds_.items()}
                                  for way, kinds_ in by_kind.items()},
           "pairs": {name: len(p[1]) for name, p in sources.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
