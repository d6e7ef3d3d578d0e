"""The topic forest on stitched dialogues with returns: ``chunktree eval-track`` on the second half of
the CoQA stories and of the SQuAD-Shifts articles (30 dialogues each of 20, 40, 80 and 160 turns,
the shipped decider): topic assignment, trees per topic, boundaries, return accuracy, and the
context frontier, the share of the current topic's earlier turns that the forest's context, top-k
retrieval, top-k with neighbours and the last-N turns hold at equal budgets (25%, 50% and 75% of
the history, the last-8 window's tokens), with the forest's paired differences.

    python bench/eval_track.py        # needs ../shared/data beside the checkout

Goals (issue 43, reported, not asserted): at 20, 40 and 80 turns and every budget, the forest
holds at least 0.05 more than top-k and no less than last-N; at 80 turns, assignment >= 0.75 and
return accuracy >= 0.90.
"""

from __future__ import annotations

from pathlib import Path

import record

from chunktree import EmbeddingCache
from chunktree.engine.inputs import default_embedder
from chunktree.track.evaluate import FRONTIER_BUDGETS, evaluate, format_report

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = {"CoQA": DATA / "coqa_test.json", "SQuAD-Shifts": DATA / "squad_shifts_new_wiki_v1.0.json"}
LENGTHS = (20, 40, 80, 160)
GOAL_LENGTHS = (20, 40, 80)
DIALOGUES = 30


def goals(name: str, report: dict) -> list[str]:
    """One line per goal of the issue: met or missed, with the figure."""
    lines = []
    for n in GOAL_LENGTHS:
        m = report["by_length"][n]
        for b in FRONTIER_BUDGETS:
            over_top_k = m[f"forest_minus_top_k_at_{b}"]["mean"]
            over_last_n = m[f"forest_minus_last_n_at_{b}"]["mean"]
            met = over_top_k >= 0.05 and over_last_n >= 0
            lines.append(f"{name}, {n} turns, budget {b}: forest - top-k {over_top_k:+.3f}, forest - last-N "
                         f"{over_last_n:+.3f}: {'met' if met else 'missed'}")
    m = report["by_length"][80]
    a, r = m["assignment"]["mean"], m["return_accuracy"]["mean"]
    lines.append(f"{name}, 80 turns: assignment {a:.3f} (goal 0.75), return accuracy {r:.3f} (goal 0.90): "
                 f"{'met' if a >= 0.75 and r >= 0.90 else 'missed'}")
    return lines


def main() -> None:
    embedder, cache = default_embedder(), EmbeddingCache()
    reports, lines, goal_lines = {}, [], []
    for name, path in SETS.items():
        report = evaluate(path, embedder=embedder, cache=cache, dialogues=DIALOGUES, lengths=LENGTHS)
        reports[name] = report
        lines += [f"**{name} ({path.name})**", *format_report(report).splitlines(), ""]
        goal_lines += goals(name, report)
    lines += ["**Goals**", *goal_lines]
    for line in lines:
        print(line)
    path = record.write("eval_track", record.title(__doc__, "eval_track"), "python bench/eval_track.py", lines,
                        {"reports": reports})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
