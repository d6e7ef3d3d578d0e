"""Fit the learned topic decider that chunktree ships (``chunktree/data/track_decider.npz``), and
measure it on validation splits of the same public data first.

    python bench/train_track_decider.py   # needs ../shared/data (DialSeg711, TIAGE, CoQA, SQuAD-Shifts)

1. Fit on the training split: DialSeg711's even half without its last 30% of dialogues, TIAGE
   train, and 60 dialogues of 40 turns stitched from the first half of the CoQA stories and 60
   from the first half of the SQuAD-Shifts (new wiki) articles; each of the four sources weighs
   the same in the fit.
2. Measure on the validation split (the last 30% of that DialSeg711 half, TIAGE dev) with
   ``segmentation.evaluate_segmentation``: Pk, WindowDiff and boundary F1 of the learned decider,
   the threshold rule and the baselines; and on 30 dialogues of 40 turns stitched from the second
   half of the CoQA stories and of the SQuAD articles (``chunktree eval-track``'s): boundary F1
   and return accuracy.
   The same figures for deciders fitted with other random starts of the network (``SPREAD_SEEDS``):
   how far the fit alone moves them, the least difference a change of the decider must beat.
3. Fit again, with the same settings, on all of it, and write the shipped file with the data,
   settings and validation figures in its ``info``.

Writes ``bench/results/train_track_decider.json``. DialSeg711's odd half and TIAGE test are kept
apart for evaluation and never read here.
"""

import json
import sys
from pathlib import Path
from typing import Any

from record import title, write

from chunktree import Embedder
from chunktree.engine.cache import EmbeddingCache
from chunktree.track.data import LabelledDialogue, SegmentedDialogue, load_labelled, load_segmentation
from chunktree.track.evaluate import evaluate
from chunktree.track.learned import DEFAULT_THRESHOLD
from chunktree.track.segmentation import evaluate_segmentation, format_segmentation
from chunktree.track.train import DEFAULT_HIDDEN, DEFAULT_L2, fit

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DIALSEG = DATA / "dialogue" / "dialseg711_even.json"
TIAGE = DATA / "dialogue" / "tiage_train_dev.json"
COQA = DATA / "coqa_test.json"
SQUAD = DATA / "squad_shifts_new_wiki_v1.0.json"
TARGET = Path(__file__).resolve().parents[1] / "chunktree" / "data" / "track_decider.npz"
STITCHED = {"coqa": COQA, "squad": SQUAD}
VALIDATION_SHARE = 0.3
SPREAD_SEEDS = (1, 2)  # the shipped decider's network starts from seed 0


def split(path: Path, labelled: list[LabelledDialogue], segmented: list[SegmentedDialogue]
          ) -> tuple[list[LabelledDialogue], list[SegmentedDialogue]]:
    """(training dialogues, validation dialogues) of one file."""
    if path == TIAGE:
        sets = [d["set"] for d in json.loads(path.read_text())]
        return [d for d, s in zip(labelled, sets) if s == "train"], [d for d, s in zip(segmented, sets) if s == "dev"]
    cut = round(len(labelled) * (1 - VALIDATION_SHARE))
    return labelled[:cut], segmented[cut:]


def training_data() -> tuple[list[LabelledDialogue], dict[str, list[SegmentedDialogue]], list[LabelledDialogue]]:
    """(the training split, the validation split of DialSeg711 and TIAGE by file stem, all of it)."""
    train: list[LabelledDialogue] = []
    validation: dict[str, list[SegmentedDialogue]] = {}
    everything: list[LabelledDialogue] = []
    for path in (DIALSEG, TIAGE):
        labelled = load_labelled(path)
        part, held = split(path, labelled, load_segmentation(path))
        train += part
        validation[path.stem] = held
        everything += labelled
    stitched = load_labelled(COQA) + load_labelled(SQUAD)
    return train + stitched, validation, everything + stitched


def validation_reports(decider: Any, validation: dict[str, list[SegmentedDialogue]], embedder: Any, cache: Any
                       ) -> tuple[dict[str, dict], dict[str, dict]]:
    """The decider on the validation split: ``evaluate_segmentation``'s report on each segmentation
    set, and ``evaluate``'s on 30 dialogues of 40 turns stitched from the second half of each
    stitched file (``STITCHED``)."""
    segmented = {name: evaluate_segmentation(dialogues, embedder, cache, decider=decider)
                 for name, dialogues in validation.items()}
    stitched = {name: evaluate(path, embedder=embedder, cache=cache, dialogues=30, lengths=(40,), decider=decider)
                for name, path in STITCHED.items()}
    return segmented, stitched


def main() -> int:
    for path in (DIALSEG, TIAGE, COQA, SQUAD):
        if not path.is_file():
            print(f"{path} not found", file=sys.stderr)
            return 1
    embedder, cache = Embedder(), EmbeddingCache()
    train, validation, everything = training_data()
    settings = {"hidden": DEFAULT_HIDDEN, "l2": DEFAULT_L2, "threshold": DEFAULT_THRESHOLD}
    decider = fit(train, embedder, cache, progress=True, **settings)
    results, lines = {"settings": settings, "train_dialogues": len(train), "validation": {}}, []
    segmented, stitched = validation_reports(decider, validation, embedder, cache)
    for name, report in segmented.items():
        results["validation"][name] = report
        lines += [f"validation, {name} ({len(validation[name])} dialogues):", *format_segmentation(report).splitlines()]
    figures = {name: {m: round(r["methods"][m]["pk"]["mean"], 3) for m in ("forest", "thresholds")}
               for name, r in segmented.items()}
    for name, report in stitched.items():
        results["validation"][f"{name}_second_half"] = report
        m = report["by_length"][40]
        lines.append(f"validation, 30 dialogues of 40 turns stitched from the second half of {STITCHED[name].name}: "
                     f"boundary F1 {m['boundary_f1']['mean']:.3f}, return accuracy {m['return_accuracy']['mean']:.3f}, "
                     f"Pk {m['pk']['mean']:.3f} (return_similarity {decider.return_similarity})")
    results["seed_spread"] = {}
    for seed in SPREAD_SEEDS:
        segmented, stitched = validation_reports(fit(train, embedder, cache, seed=seed, **settings), validation,
                                                 embedder, cache)
        row = {name: round(r["methods"]["forest"]["pk"]["mean"], 3) for name, r in segmented.items()}
        for name, report in stitched.items():
            row[f"{name}_return_accuracy"] = round(report["by_length"][40]["return_accuracy"]["mean"], 3)
        results["seed_spread"][seed] = row
        lines.append(f"the same fit, network seed {seed}: validation Pk "
                     + ", ".join(f"{name} {row[name]}" for name in validation)
                     + f"; return accuracy at 40 turns CoQA {row['coqa_return_accuracy']}, "
                     f"SQuAD-Shifts {row['squad_return_accuracy']}")
    shipped = fit(everything, embedder, cache, progress=True, info={
        "data": ["DialSeg711 even half (shared/data/dialogue/dialseg711_even.json)",
                 "TIAGE train + dev (shared/data/dialogue/tiage_train_dev.json)",
                 "60 dialogues of 40 turns stitched from the first half of the CoQA test stories",
                 "60 dialogues of 40 turns stitched from the first half of the SQuAD-Shifts new-wiki articles"],
        "validation_pk": figures, "made_by": "bench/train_track_decider.py"}, **settings)
    results["shipped"] = shipped.info
    lines.append(f"shipped {TARGET.name}: {shipped.info['dialogues']} dialogues, {shipped.info['pairs']} pairs; "
                 f"validation Pk {figures}")
    print("\n".join(lines))
    # the results first: they describe the code that made the file, before the file changes the tree
    write("train_track_decider", title(__doc__, "train_track_decider"), "python bench/train_track_decider.py", lines,
          results)
    shipped.save(TARGET)
    return 0


if __name__ == "__main__":
    sys.exit(main())
