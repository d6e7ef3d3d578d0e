"""How much gold evidence each order keeps: the offline evaluation of orders on SQuAD-format data.

For every question, each article's paragraphs are the chunks; the extractive worker that
``chunktree read --extractive`` runs (``engine.read.extractive``, no LLM) reads them in each order
with a memory budget of ``budget`` x the article's tokens. Per order:

- retention: the fraction of questions whose answer span lies inside a sentence still in memory
  at the end;
- gold position: where the answer's paragraph comes in the order (0 = first, 1 = last);
- entity distance: for questions whose answer text occurs in several paragraphs, the mean
  distance in the order between those paragraphs (0 = adjacent ... 1 = first and last).

Each mean comes with a 95% confidence interval over questions (normal approximation).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import InvalidValueError, number
from chunktree.engine.embedding import embed_texts
from chunktree.engine.order import order
from chunktree.engine.read.extractive import ExtractiveWorker, Sentences

ORDERS = ("document", "dense", "bfs", "dfs", "random")


def _mean_ci(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": math.nan, "ci95": math.nan, "n": 0}
    a = np.asarray(values, dtype=np.float64)
    ci = 1.96 * a.std(ddof=1) / math.sqrt(len(a)) if len(a) > 1 else math.nan
    return {"mean": float(a.mean()), "ci95": float(ci), "n": int(len(a))}


def load_squad(path: str | Path) -> list[dict[str, Any]]:
    """The articles of a SQuAD-format JSON file (``data`` -> ``paragraphs`` -> ``qas``)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))["data"]
        for article in data:
            for p in article["paragraphs"]:
                p["context"], p["qas"]  # noqa: B018 - shape check
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidValueError(f"{path}: not a SQuAD-format file (data -> paragraphs -> context/qas): {exc}") from None
    return data


def evaluate_orders(
    articles: list[dict[str, Any]],
    embedder: Any,
    cache: Any = None,
    *,
    budget: float = 0.1,
    orders: tuple[str, ...] = ORDERS,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Run the extractive reader under each order for every question; return metrics per order."""
    number(budget, "budget (a fraction of the article)", 0.0, 1.0, low_open=True)
    unknown = set(orders) - set(ORDERS)
    if unknown:
        raise InvalidValueError(f"orders must be among {list(ORDERS)}; got {sorted(unknown)}")
    per_order: dict[str, dict[str, list[float]]] = {o: {"retained": [], "gold_position": [], "entity_distance": []}
                                                     for o in orders}
    questions = 0
    iterator: Any = articles
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(articles, desc="articles", unit="article", delay=1.0)
    for article in iterator:
        paragraphs = [p["context"] for p in article["paragraphs"]]
        n = len(paragraphs)
        if n < 2:
            continue
        sentences = Sentences.of(paragraphs, embedder, cache)
        para_vecs, _ = embed_texts(paragraphs, embedder, cache)
        article_tokens = int(embedder.count_tokens(paragraphs).sum())
        memory_budget = max(1, int(round(budget * article_tokens)))
        qas = [(pid, qa) for pid, p in enumerate(article["paragraphs"]) for qa in p["qas"] if qa.get("answers")]
        if not qas:
            continue
        q_vecs, _ = embed_texts([qa["question"] for _, qa in qas], embedder, cache)
        for (gold, qa), q in zip(qas, q_vecs):
            questions += 1
            scores = sentences.vectors @ q
            spans = [(a["answer_start"], a["answer_start"] + len(a["text"])) for a in qa["answers"]]
            answer_texts = {a["text"].strip().lower() for a in qa["answers"] if a["text"].strip()}
            bearing = [j for j, text in enumerate(paragraphs) if any(t in text.lower() for t in answer_texts)]
            for name in orders:
                if name == "random":
                    seq = np.random.default_rng([seed, questions]).permutation(n)
                else:
                    seq = order(para_vecs, q, strategy=name).order
                worker = ExtractiveWorker(sentences, scores, memory_budget, paragraphs)
                for pid in seq.tolist():
                    worker.read(pid)
                retained = any(sentences.chunk[s] == gold and sentences.start[s] <= a0 and b0 <= sentences.end[s]
                               for s in worker.kept_sentences() for a0, b0 in spans)
                pos = np.empty(n, dtype=np.int64)
                pos[seq] = np.arange(n)
                m = per_order[name]
                m["retained"].append(float(retained))
                m["gold_position"].append(pos[gold] / (n - 1))
                if len(bearing) >= 2:
                    m["entity_distance"].append(float(np.mean(
                        [abs(pos[a] - pos[b]) / (n - 1) for a, b in itertools.combinations(bearing, 2)])))
    return {"questions": questions, "articles": len(articles), "budget": budget, "seed": seed,
            "orders": {name: {metric: _mean_ci(values) for metric, values in m.items()}
                       for name, m in per_order.items()}}


def format_table(result: dict[str, Any]) -> str:
    """The evaluation as a Markdown table."""
    lines = [f"{result['questions']} questions over {result['articles']} articles, memory budget "
             f"{100 * result['budget']:.0f}% of each article (extractive reader); mean ± 95% CI",
             "",
             "| order | gold evidence retained | gold paragraph position (0 first, 1 last) | "
             "distance between answer-bearing paragraphs |",
             "|---|---|---|---|"]
    for name, m in result["orders"].items():
        r, g, e = m["retained"], m["gold_position"], m["entity_distance"]
        lines.append(f"| {name} | {100 * r['mean']:.1f}% ± {100 * r['ci95']:.1f} | {g['mean']:.3f} ± {g['ci95']:.3f} | "
                     f"{e['mean']:.3f} ± {e['ci95']:.3f} (n={e['n']}) |")
    return "\n".join(lines)
