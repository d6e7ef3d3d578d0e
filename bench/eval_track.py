"""The topic forest on stitched dialogues with returns: ``chunktree eval-track`` on the second half
of the CoQA stories (30 dialogues each of 40 and 80 turns, the shipped decider): topic assignment,
boundary F1, return accuracy, Pk, and the context's recall of the story's earlier turns against
the last-8 window, the top-8 by similarity and the full history, at equal budgets
(``forest_minus_last_n_recall``: the forest within the window's tokens minus the window, paired
by dialogue).

    python bench/eval_track.py        # needs ../shared/data beside the checkout

Goal (issue 27, reported, not asserted): at the last-8 window's tokens the forest holds more of
the current story's earlier turns than the window, on 80-turn dialogues.
"""

from __future__ import annotations

from pathlib import Path

import record

from chunktree import EmbeddingCache
from chunktree.engine.inputs import default_embedder
from chunktree.track.evaluate import evaluate, format_report

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "coqa_test.json"
LENGTHS = (40, 80)
DIALOGUES = 30


def main() -> None:
    report = evaluate(DATA, embedder=default_embedder(), cache=EmbeddingCache(), dialogues=DIALOGUES, lengths=LENGTHS)
    m = report["by_length"][80]

    def cell(key: str) -> str:
        return f"{m[key]['mean']:.3f} [{m[key]['lo']:.3f}, {m[key]['hi']:.3f}]"

    lines = [f"{DIALOGUES} dialogues of each length stitched from the second half of {DATA.name} "
             f"({report['stories']} stories), decider {report['decider']}; means over dialogues [95% bootstrap intervals].",
             "", f"80 turns: at the last-8 window's tokens the forest holds {cell('forest_at_last_n_recall')} of the "
             f"story's earlier turns, the window {cell('last_n_recall')}; paired difference "
             f"{cell('forest_minus_last_n_recall')}.", "", *format_report(report).splitlines()]
    for line in lines:
        print(line)
    path = record.write("eval_track", record.title(__doc__, "eval_track"), "python bench/eval_track.py", lines,
                        {"report": report})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
