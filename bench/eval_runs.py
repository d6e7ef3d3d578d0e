"""The sweep behind the ``runs`` order's settings (``RUNS_HEAD``, ``RUNS_TAIL``, ``RUNS_STRENGTH``
in ``chunktree.engine.order``), on the shared data in ../shared/data:

1. HotpotQA (423 dev questions): the later gold paragraph's position (0 first, 1 last) on bridge
   and comparison questions, and its paired difference from dense [95% bootstrap interval];
2. SQuAD-Shifts (7,936 questions): the gold paragraph's position, and its difference from dense;
3. topic runs: corpora of a few topics — the seven notes of ``examples/notes``, the corpora of
   ``tests/fixtures/topic_corpora.json``, and 40 mixes of 2-4 paragraphs from each of 3-4
   SQuAD-Shifts articles (an article is a topic; one question of each article asked) — and the
   share of questions for which every topic is read as one run.

    python bench/eval_runs.py

The exact tree of each passage is built once; each setting only re-runs the traversal.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import record

from chunktree import EmbeddingCache
from chunktree.engine.embedding import embed_texts
from chunktree.engine.evaluate import load
from chunktree.engine.evaluate.stats import bootstrap
from chunktree.engine.inputs import default_embedder
from chunktree.engine.order import RUNS_HEAD, RUNS_STRENGTH, RUNS_TAIL, order, runs_keys
from chunktree.kernels.traversal import children_csr, runs_order

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
HEADS = (0.2, 0.25, 0.3, 0.35, 0.4)
TAILS = (0.35, 0.4, 0.5, 0.6, np.inf)
STRENGTHS = (0.5, 1.0, 1.5)
MIXES = 40


def topic_corpora(squad: list[dict]) -> list[tuple[list[str], list[str], list[str]]]:
    """(texts, topic labels, questions) of every labelled corpus."""
    notes = sorted((ROOT / "examples" / "notes").glob("*.md"))
    out = [([p.read_text(encoding="utf-8") for p in notes], [p.name.split("-")[0] for p in notes],
            ["Why did my loaf not rise in the oven?", "How does a request reach a pod through an Ingress?",
             "How did Roman aqueducts carry water downhill?", "What temperature should the public baths be?"])]
    for c in json.loads((ROOT / "tests" / "fixtures" / "topic_corpora.json").read_text(encoding="utf-8"))["corpora"]:
        out.append(([x["text"] for x in c["chunks"]], [x["topic"] for x in c["chunks"]],
                    [q["text"] for q in c["questions"]]))
    rng = np.random.default_rng(0)
    for _ in range(MIXES):
        texts, labels, questions = [], [], []
        for a in rng.choice(len(squad), int(rng.integers(3, 5)), replace=False):
            paragraphs = squad[a]["paragraphs"]
            picked = rng.choice(len(paragraphs), int(rng.integers(2, 5)), replace=False)
            texts += [paragraphs[i]["context"] for i in picked]
            labels += [str(a)] * len(picked)
            questions.append(paragraphs[picked[0]]["qas"][0]["question"])
        perm = rng.permutation(len(texts))
        out.append(([texts[i] for i in perm], [labels[i] for i in perm], questions))
    return out


class Case:
    """One question on one passage: its tree (built once) and what a setting is scored by."""

    def __init__(self, vectors: np.ndarray, q: np.ndarray, gold: tuple[int, ...] = (), labels: list[str] | None = None):
        r = order(vectors, q, strategy="bfs", method="exact")
        self.qsim, self.parent, self.root, self.gold, self.labels = r.query_similarity, r.parent, r.root, gold, labels
        self.weight = np.nan_to_num(r.parent_similarity).astype(np.float32)
        self.indptr, self.children = children_csr(self.parent)
        ids = np.arange(len(self.qsim))
        self.dense = np.lexsort((ids, -self.qsim))

    def runs(self, head: float, tail: float, strength: float) -> np.ndarray:
        keys = runs_keys(self.qsim, self.weight, self.parent, self.root, head, tail, strength)
        return runs_order(self.indptr, self.children, self.parent, *keys)

    def later_gold(self, seq: np.ndarray) -> float:
        where = np.empty(len(seq), dtype=np.int64)
        where[seq] = np.arange(len(seq))
        return float(where[list(self.gold)].max()) / (len(seq) - 1)

    def one_run_each(self, seq: np.ndarray) -> bool:
        assert self.labels is not None
        changes = sum(self.labels[a] != self.labels[b] for a, b in itertools.pairwise(seq))
        return changes + 1 == len(set(self.labels))


def cases_of(path: Path, embedder, cache) -> dict[str, list[Case]]:
    _, passages = load(path)
    out: dict[str, list[Case]] = {}
    for p in passages:
        if len(p.paragraphs) < 2:
            continue
        vectors, _ = embed_texts(p.paragraphs, embedder, cache)
        qv, _ = embed_texts([q.text for q in p.questions], embedder, cache)
        for question, v in zip(p.questions, qv):
            out.setdefault(question.kind, []).append(Case(vectors, v, gold=question.gold))
    return out


def cell(ci: dict[str, float]) -> str:
    return f"{ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}], {ci['later']} later"


def main() -> None:
    embedder, cache = default_embedder(), EmbeddingCache()
    hotpot = cases_of(DATA / "hotpotqa_dev_sample.jsonl", embedder, cache)
    squad = [c for cs in cases_of(DATA / "squad_shifts_new_wiki_v1.0.json", embedder, cache).values() for c in cs]
    articles = json.loads((DATA / "squad_shifts_new_wiki_v1.0.json").read_text(encoding="utf-8"))["data"]
    topics = []
    for texts, labels, questions in topic_corpora(articles):
        vectors, _ = embed_texts(texts, embedder, cache)
        qv, _ = embed_texts(questions, embedder, cache)
        topics += [Case(vectors, v, labels=labels) for v in qv]
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    def dense_shares() -> list[str]:
        return [f"{np.mean([c.one_run_each(c.dense) for c in topics]):.1%}"]

    say(f"{len(hotpot['bridge'])} bridge and {len(hotpot['comparison'])} comparison HotpotQA questions, "
        f"{len(squad)} SQuAD-Shifts questions, {len(topics)} questions on topic-labelled corpora. "
        "Later gold position: its paired difference from dense, mean [95% bootstrap interval] "
        "(negative: earlier than dense), and how many questions read it later than dense. "
        "Topic runs: the share of questions for which every topic is read "
        f"as one run (dense order: {dense_shares()[0]}). Shipped: head {RUNS_HEAD}, tail {RUNS_TAIL}, "
        f"strength {RUNS_STRENGTH}.")
    say("")
    say("| head | tail | strength | bridge − dense | comparison − dense | SQuAD-Shifts − dense | topic runs |")
    say("|---|---|---|---|---|---|---|")
    rows = []
    for head, tail, strength in itertools.product(HEADS, TAILS, STRENGTHS):
        if tail <= head:
            continue
        diffs = {}
        for kind, cases in (("bridge", hotpot["bridge"]), ("comparison", hotpot["comparison"]), ("squad", squad)):
            d = [c.later_gold(c.runs(head, tail, strength)) - c.later_gold(c.dense) for c in cases]
            diffs[kind] = {**bootstrap(d), "later": sum(x > 0 for x in d)}
        share = float(np.mean([c.one_run_each(c.runs(head, tail, strength)) for c in topics]))
        rows.append({"head": head, "tail": None if np.isinf(tail) else tail, "strength": strength, **diffs,
                     "topic_runs": share})
        say(f"| {head} | {'none' if np.isinf(tail) else tail} | {strength} | {cell(diffs['bridge'])} | "
            f"{cell(diffs['comparison'])} | {cell(diffs['squad'])} | {share:.1%} |")
    path = record.write("eval_runs", record.title(__doc__, "eval_runs"), "python bench/eval_runs.py", lines,
                        {"rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
