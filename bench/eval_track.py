"""The topic forest on stitched dialogues with returns and on real long conversations.

1. ``chunktree eval-track`` on the second half of the CoQA stories and of the SQuAD-Shifts
   articles (30 dialogues each of 20, 40, 80 and 160 turns, the shipped decider): topic
   assignment, trees per topic, boundaries, return accuracy (and the share of returns that go
   to an earlier tree of their topic instead), and the context frontier, the share of the current
   topic's earlier turns that the forest's context, top-k retrieval, top-k with neighbours and
   the last-N turns hold at equal budgets (25%, 50% and 75% of the history, the last-8 window's
   tokens), with the forest's paired differences.
2. ``chunktree eval-track --data locomo`` on the LoCoMo half in ``../shared/data/dialogue``
   (``chunktree.track.locomo``): the share of each question's evidence utterances the context
   holds at 256 to 4,096 tokens, the question added as a turn and asked with ``context(query=)``,
   against dense, BM25, hybrid (reciprocal rank fusion) and last-N retrieval, by question kind,
   with intervals over conversations; and the forest's trees.

    python bench/eval_track.py        # needs ../shared/data beside the checkout

Goals (reported, not asserted): at 20, 40 and 80 turns and every budget, the forest holds at least
0.05 more than top-k and no less than last-N; on SQuAD-Shifts at 80 turns, assignment >= 0.75 and
return accuracy >= 0.80; on LoCoMo, the forest (question as a turn) at least the best of dense,
BM25 and hybrid + 0.03 at 512, 1,024 and 2,048 tokens, and no question kind below hybrid there.
"""

from __future__ import annotations

from pathlib import Path

import record

from chunktree import EmbeddingCache
from chunktree.engine.inputs import default_embedder
from chunktree.track.evaluate import FRONTIER_BUDGETS, evaluate, format_report
from chunktree.track.locomo import evaluate_locomo, format_locomo, load_locomo

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = {"CoQA": DATA / "coqa_test.json", "SQuAD-Shifts": DATA / "squad_shifts_new_wiki_v1.0.json"}
LOCOMO = DATA / "dialogue" / "locomo_half.json"
LOCOMO_GOAL_BUDGETS = (512, 1024, 2048)
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
            target, ceiling = m[f"top_k_at_{b}_recall"]["mean"] + 0.05, m[f"ceiling_at_{b}_recall"]["mean"]
            lines.append(f"{name}, {n} turns, budget {b}: forest - top-k {over_top_k:+.3f}, forest - last-N "
                         f"{over_last_n:+.3f}: {'met' if met else 'missed'}"
                         + ("" if met or target <= ceiling else
                            f" (top-k + 0.05 is {target:.3f}, above the ceiling {ceiling:.3f}: out of reach)"))
    m = report["by_length"][80]
    a, r = m["assignment"]["mean"], m["return_accuracy"]["mean"]
    lines.append(f"{name}, 80 turns: assignment {a:.3f} (goal 0.75), return accuracy {r:.3f} (goal 0.80): "
                 f"{'met' if a >= 0.75 and r >= 0.80 else 'missed'}; a further "
                 f"{m['return_to_earlier_tree']['mean']:.3f} of the returns go to an earlier tree of their topic")
    return lines


def locomo_goals(report: dict) -> list[str]:
    """The LoCoMo goals: met or missed, with the figures."""
    lines = []
    for b in LOCOMO_GOAL_BUDGETS:
        forest = report["all"]["forest"][b]["mean"]
        best, name = max((report["all"][m][b]["mean"], m) for m in ("dense", "bm25", "hybrid"))
        below = [f"{k} {by['forest'][b]['mean']:.3f} < {by['hybrid'][b]['mean']:.3f}" for k, by in report["by_kind"].items()
                 if by["forest"][b]["mean"] < by["hybrid"][b]["mean"]]
        lines.append(f"LoCoMo, {b:,} tokens: forest {forest:.3f}, best retrieval ({name}) {best:.3f}, difference "
                     f"{forest - best:+.3f} (goal +0.030): {'met' if forest - best >= 0.03 else 'missed'}; kinds below "
                     f"hybrid: {', '.join(below) or 'none'}")
    return lines


def main() -> None:
    embedder, cache = default_embedder(), EmbeddingCache()
    reports, lines, goal_lines = {}, [], []
    for name, path in SETS.items():
        report = evaluate(path, embedder=embedder, cache=cache, dialogues=DIALOGUES, lengths=LENGTHS)
        reports[name] = report
        lines += [f"**{name} ({path.name})**", *format_report(report).splitlines(), ""]
        goal_lines += goals(name, report)
    locomo = evaluate_locomo(load_locomo(LOCOMO), embedder=embedder, cache=cache)
    reports["LoCoMo"] = locomo
    lines += [f"**LoCoMo ({LOCOMO.name})**", *format_locomo(locomo).splitlines(), ""]
    goal_lines += locomo_goals(locomo)
    lines += ["**Goals**", *goal_lines]
    for line in lines:
        print(line)
    path = record.write("eval_track", record.title(__doc__, "eval_track"), "python bench/eval_track.py", lines,
                        {"reports": reports})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
