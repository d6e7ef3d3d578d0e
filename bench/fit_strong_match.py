"""Choose the strong-match rule's settings (``STRONG_MATCH``, ``STRONG_MARGIN``,
``STRONG_PROBABILITY`` in ``chunktree/track/decide.py``) on data the evaluation does not use.

    python bench/fit_strong_match.py   # needs ../shared/data (CoQA, SQuAD-Shifts, DialSeg711, TIAGE)

For each setting of a grid (and the rule switched off), with the shipped decider:

- 20 dialogues of 80 turns stitched from the first half of the CoQA stories and of the SQuAD-Shifts
  articles: return accuracy, topic assignment and boundary F1 (``evaluate.score_dialogue``);
- the training part of DialSeg711's even half (its first 70%) and TIAGE train: Pk
  (``segmentation.evaluate_segmentation``).

The setting chosen has the best mean of return accuracy and assignment over the two stitched sets
among those whose Pk on each segmentation set is no more than 0.005 above the rule switched off.
Its figures on held-out data come from ``bench/eval_track.py`` and
``bench/train_track_decider.py``.

Writes ``bench/results/fit_strong_match.json``.
"""

import itertools
import json
import sys
from pathlib import Path

import numpy as np
from record import title, write

import chunktree.track.decide as decide
from chunktree import Embedder
from chunktree.engine.cache import EmbeddingCache
from chunktree.track.data import load_segmentation, load_stories, stitch
from chunktree.track.decide import Thresholds
from chunktree.track.evaluate import embed_turns, run_forest, score_dialogue
from chunktree.track.segmentation import evaluate_segmentation

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
STITCHED = {"coqa": DATA / "coqa_test.json", "squad": DATA / "squad_shifts_new_wiki_v1.0.json"}
DIALSEG, TIAGE = DATA / "dialogue" / "dialseg711_even.json", DATA / "dialogue" / "tiage_train_dev.json"
DIALOGUES, LENGTH = 20, 80
GRID = list(itertools.product((0.5, 1.0), (1.0, 1.5), (0.05, 0.1, 0.2)))
PK_SLACK = 0.005


def segmentation_sets() -> dict[str, list]:
    """The training parts of DialSeg711's even half and of TIAGE, as segmentation dialogues."""
    dialseg = load_segmentation(DIALSEG)
    sets = [d["set"] for d in json.loads(TIAGE.read_text())]
    return {"dialseg711": dialseg[:round(len(dialseg) * 0.7)],
            "tiage": [d for d, s in zip(load_segmentation(TIAGE), sets) if s == "train"]}


def main() -> int:
    for path in (*STITCHED.values(), DIALSEG, TIAGE):
        if not path.is_file():
            print(f"{path} not found", file=sys.stderr)
            return 1
    embedder, cache = Embedder(), EmbeddingCache()
    stitched = {}
    for name, path in STITCHED.items():
        stories = load_stories(path)
        made = [stitch(stories[:len(stories) // 2], LENGTH, 100 + i) for i in range(DIALOGUES)]
        stitched[name] = (made, embed_turns(made, embedder, cache, False))
    segmented = segmentation_sets()
    rows = []
    for setting in [None, *GRID]:
        decide.STRONG_MATCH, decide.STRONG_MARGIN, decide.STRONG_PROBABILITY = setting or (float("inf"), 0.0, 0.0)
        row = dict(zip(("strong_match", "strong_margin", "strong_probability"), setting or (None, None, None)))
        for name, (made, embedded) in stitched.items():
            scores = [score_dialogue(turns, run_forest(turns, u, v, embedder, Thresholds())[0])
                      for turns, (u, v, _) in zip(made, embedded)]
            for key in ("return_accuracy", "assignment", "boundary_f1"):
                row[f"{name}_{key}"] = float(np.nanmean([s[key] for s in scores]))
        for name, dialogues in segmented.items():
            row[f"{name}_pk"] = evaluate_segmentation(dialogues, embedder, cache)["methods"]["forest"]["pk"]["mean"]
        row["score"] = float(np.mean([row[f"{n}_return_accuracy"] + row[f"{n}_assignment"] for n in stitched]))
        rows.append(row)
        print(json.dumps(row), flush=True)
    off = rows[0]
    allowed = [r for r in rows[1:] if all(r[f"{n}_pk"] <= off[f"{n}_pk"] + PK_SLACK for n in segmented)]
    best = max(allowed, key=lambda r: r["score"]) if allowed else off
    keys = [k for k in rows[0] if not k.startswith("strong_")]
    lines = [f"{DIALOGUES} dialogues of {LENGTH} turns stitched from the first half of each file; DialSeg711 even half "
             "(first 70%) and TIAGE train; the shipped decider",
             "| strong match | margin | probability | " + " | ".join(keys) + " |", "|---|---|---|" + "---|" * len(keys),
             *(f"| {r['strong_match'] or 'off'} | {r['strong_margin'] or '-'} | {r['strong_probability'] or '-'} | "
               + " | ".join(f"{r[k]:.3f}" for k in keys) + " |" for r in rows),
             f"chosen: STRONG_MATCH = {best['strong_match']}, STRONG_MARGIN = {best['strong_margin']}, STRONG_PROBABILITY = "
             f"{best['strong_probability']} (best mean of return accuracy and assignment with Pk at most {PK_SLACK} above "
             "the rule switched off)"]
    print("\n".join(lines))
    write("fit_strong_match", title(__doc__, "fit_strong_match"), "python bench/fit_strong_match.py", lines,
          {"rows": rows, "chosen": best})
    return 0


if __name__ == "__main__":
    sys.exit(main())
