"""The sweeps behind eval-order's defaults, on the HotpotQA dev sample in ../shared/data:

1. the memory-aware reader's weight: both-gold retention (10% memory) per weight, order and
   question kind — it chose the query-only reader as the default (no weight helped);
2. the guided order's blend: later gold position per blend and kind, against dense.

    python bench/eval_orders.py

Embeddings go through the embedding cache (the default one), so a second run only reads.
"""

from __future__ import annotations

from pathlib import Path

import record

from chunktree import EmbeddingCache
from chunktree.engine.evaluate import evaluate_orders, load
from chunktree.engine.inputs import default_embedder

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "hotpotqa_dev_sample.jsonl"
WEIGHTS = (0.0, 0.1, 0.25, 0.5, 1.0)
BLENDS = (0.0, 0.1, 0.25, 0.5, 0.75)
ORDERS = ("document", "dense", "bfs", "guided", "dense_tree")
KINDS = ("bridge", "comparison")


def main() -> None:
    lines: list[str] = []

    def say(line: str) -> None:
        print(line)
        lines.extend(line.split("\n"))

    embedder, cache = default_embedder(), EmbeddingCache()
    _, passages = load(DATA)
    readers = {f"w{w}": w for w in WEIGHTS}
    summary = evaluate_orders(passages, embedder, cache, orders=ORDERS, readers=readers)["summary"]
    say("both gold paragraphs held at the end, % (10% memory), by memory weight\n")
    say("| kind | order | " + " | ".join(f"weight {w}" for w in WEIGHTS) + " |")
    say("|---" * (2 + len(WEIGHTS)) + "|")
    for kind in KINDS:
        for name in ORDERS:
            m = summary[kind]["orders"][name]
            say(f"| {kind} | {name} | " + " | ".join(f"{100 * m[f'{r}:gold_all']['mean']:.1f}" for r in readers) + " |")

    say("\nguided order: later gold position (0 first, 1 last), and its paired difference from dense [95% CI]\n")
    say("| blend | " + " | ".join(f"{kind} | − dense" for kind in KINDS) + " |")
    say("|---" * (1 + 2 * len(KINDS)) + "|")
    for blend in BLENDS:
        s = evaluate_orders(passages, embedder, cache, orders=("dense", "guided"), readers={"query": 0.0},
                            blend=blend)["summary"]
        cells = []
        for kind in KINDS:
            g = s[kind]["orders"]["guided"]
            d = g["later_gold - dense"]
            cells += [f"{g['later_gold']['mean']:.3f}", f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"]
        say(f"| {blend} | " + " | ".join(cells) + " |")
    print(f"wrote {record.write('eval_orders', record.title(__doc__, 'eval_orders'), 'python bench/eval_orders.py', lines, {})}")


if __name__ == "__main__":
    main()
