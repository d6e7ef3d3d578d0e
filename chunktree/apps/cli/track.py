"""``chunktree track`` (a dialogue as a forest of topic trees), ``eval-track`` and ``train-track``."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from chunktree.apps.cli import common, options
from chunktree.checks import InvalidValueError, text
from chunktree.engine.results import dumps
from chunktree.files import FolderLock, replacing
from chunktree.track.learned import DEFAULT_THRESHOLD
from chunktree.track.train import DEFAULT_HIDDEN, DEFAULT_L2, MIN_NETWORK_PAIRS


def register(sub: Any) -> None:
    """The track, eval-track and train-track commands."""
    p = sub.add_parser("track", help="keep a dialogue as a forest of topic trees",
                       description="Place each turn of a dialogue in a forest of topic trees (continue, branch, "
                                   "switch topic, new topic), print every decision and the forest, and optionally "
                                   "the context the last turn would get. DIALOGUE.jsonl: one turn per line, "
                                   "'user' (required), 'assistant' and 'conversation' (optional; one forest each).")
    p.add_argument("dialogue", type=Path, metavar="DIALOGUE.jsonl")
    p.add_argument("--format", choices=("text", "json", "jsonl"), default="text",
                   help="text; json: decisions, forest and context per conversation; jsonl: one decision per line")
    p.add_argument("--budget-tokens", type=options.int_in(1), default=None,
                   help="print the context the last turn of each conversation would get, within N tokens")
    p.add_argument("--query", default=None, metavar="TEXT",
                   help="print the context for this question about each conversation instead (it is not added "
                        "as a turn); with --budget-tokens, within N tokens")
    p.add_argument("--save", type=Path, default=None, metavar="FOLDER",
                   help="write each conversation's forest to FOLDER/<conversation>.json (a conversation id: "
                        "1-64 letters, digits, '-' or '_')")
    p.add_argument("--llm-base-url", default=None,
                   help="ask this OpenAI-compatible server which topic an uncertain turn belongs to")
    p.add_argument("--llm-model", default=None, help="the judge's model name")
    options.add_decider_arg(p)
    options.add_embedder_args(p)
    options.add_cache_args(p)
    options.add_force(p)
    p.set_defaults(func=cmd_track)

    p = sub.add_parser("eval-track", help="measure the topic forest on segmentation benchmarks, stitched CoQA, LoCoMo",
                       description="DATA is a segmentation file (DialSeg711, TIAGE, SuperDialseg: a JSON list of "
                                   "dialogues with 'utterances' and 'segments'): Pk, WindowDiff and boundary F1 under the "
                                   "SuperDialseg protocol against the threshold rule, random and even baselines; or a "
                                   "CoQA file: dialogues stitched from its stories (interleaved, with returns), with topic "
                                   "assignment, boundaries, return accuracy and context against baselines; or a JSONL "
                                   "file of chats with a 'topic' per turn (as train-track reads them): each chat as "
                                   "written, the share of turns placed as labelled, boundaries and returns against the "
                                   "threshold rule; or a LoCoMo file (long conversations with questions and the ids of "
                                   "the utterances that hold each answer): the share of each question's evidence the "
                                   "context holds at each budget, against dense, BM25, hybrid and last-N retrieval. "
                                   "95%% intervals over dialogues (LoCoMo: over conversations).")
    p.add_argument("data", type=Path, metavar="DATA")
    p.add_argument("--data", dest="kind", choices=("auto", "segmentation", "stitched", "chats", "locomo"), default="auto",
                   help="what DATA holds (default: told from the file)")
    p.add_argument("--budgets", type=options.int_in(1), nargs="+", default=[256, 512, 1024, 2048, 4096],
                   help="LoCoMo: the context budgets in tokens (default %(default)s)")
    p.add_argument("--dialogues", type=options.int_in(1), default=30, help="stitched dialogues per length (default %(default)s)")
    p.add_argument("--lengths", type=options.int_in(2), nargs="+", default=[20, 40, 80], help="turns per stitched dialogue")
    p.add_argument("--seed", type=options.int_in(0), default=0, help="seed of the stitching (default %(default)s)")
    p.add_argument("--calibrate", action="store_true",
                   help="search the thresholds on the first half of the stories instead of evaluating")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    options.add_decider_arg(p)
    options.add_embedder_args(p)
    options.add_cache_args(p)
    options.add_force(p)
    p.set_defaults(func=cmd_eval_track)

    p = sub.add_parser("train-track", help="fit the topic forest's learned decider on dialogues with known topics",
                       description="Fit the learned decider (a small neural network over features of each turn "
                                   "against each tree) on FILES: segmentation files (each segment a topic), CoQA files (dialogues "
                                   "stitched from the first half of the stories, with returns) or JSONL turns with a "
                                   "'topic' each ('user', 'topic', optional 'assistant' and 'conversation'). Use the result "
                                   "with --decider.")
    p.add_argument("files", type=Path, nargs="+", metavar="FILE")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DECIDER.npz")
    p.add_argument("--hidden", type=options.int_in(0), default=DEFAULT_HIDDEN,
                   help="tanh units in the hidden layer; 0 for a logistic regression, which is also what fewer "
                        f"than {MIN_NETWORK_PAIRS:,} turn-tree pairs get (default %(default)s)")
    p.add_argument("--l2", type=options.float_in(0.0), default=DEFAULT_L2, help="L2 regularisation (default %(default)s)")
    p.add_argument("--seed", type=options.int_in(0), default=0,
                   help="the random start of the network (default %(default)s); fits with other seeds show how much "
                        "the fit alone moves a decider's figures")
    p.add_argument("--threshold", type=options.float_in(0.0, high=1.0), default=DEFAULT_THRESHOLD,
                   help="the least probability that keeps a turn in an existing tree (default %(default)s)")
    options.add_embedder_args(p)
    options.add_cache_args(p)
    options.add_force(p)
    p.set_defaults(func=cmd_train_track)


def cmd_track(args: argparse.Namespace) -> int:
    from chunktree.track import Forest
    from chunktree.track.dialogue import conversation_file, read_dialogue

    if args.query is not None:
        text(args.query, "--query")
    conversations = read_dialogue(args.dialogue, file_ids=args.save is not None)  # every line checked before work
    if args.save is not None:
        files = {name: conversation_file(args.save, name) for name in conversations}
        for name, file in files.items():
            common.check_output(args, file, "--save", f"(conversation {name!r}) ")
    # one writer per folder, as the service's: a server or another run on it is refused before any work
    with FolderLock(args.save, "chunktree track --save") if args.save is not None else contextlib.nullcontext():
        llm = None
        if args.llm_base_url or args.llm_model:
            from chunktree.engine.read import ChatClient

            llm = ChatClient(args.llm_base_url, args.llm_model)
        embedder, cache = common.make_embedder(args), common.open_cache(args)
        out: dict[str, Any] = {}
        for name, turns in conversations.items():
            forest = Forest(embedder, cache=cache, llm=llm, decider=args.decider)
            decisions = []
            for index, d in enumerate(forest.replay((user, assistant) for user, assistant, _ in turns)):
                decisions.append(d.to_dict())
                if args.format == "jsonl":
                    print(dumps({"conversation": name, "turn": index, **d.to_dict()}))
                elif args.format == "text":
                    fits = ", ".join(f"topic {c.tree} {c.fit:.2f}" for c in d.candidates[:3])
                    where = "a new tree" if d.parent is None else f"after #{d.parent}"
                    print(f"[{name}] turn {index}: {d.action} -> topic {d.tree}, {where} ({d.rule}"
                          f"{'; fit ' + fits if fits else ''}){' [LLM asked]' if d.llm else ''}")
            context = (forest.context(args.budget_tokens, query=args.query)
                       if args.budget_tokens is not None or args.query is not None else None)
            if args.save is not None:
                forest.save(files[name])
            if args.format == "text":
                print(forest.show())
                if context is not None:
                    print(f"context for {'the question' if args.query is not None else 'the next turn'}: {context.tokens} "
                          f"tokens, {len(context.turns)} turns verbatim{', cut to the budget' if context.cut else ''}")
                    for node, why in zip(context.turns, context.why):
                        print(f"  #{node}: {why}")
                    for m in context.messages:
                        print(f"  {m['role']}: {common.snippet(m['content'], 160)}")
            out[name] = {"decisions": decisions, "forest": {k: v for k, v in forest.to_dict().items() if k != "vectors"},
                         "context": None if context is None else context.to_dict()}
    if args.format == "json":
        print(dumps({"conversations": out}, indent=1))
    return 0


def cmd_eval_track(args: argparse.Namespace) -> int:
    from chunktree.track.data import load_labelled, load_segmentation, sniff
    from chunktree.track.evaluate import calibrate, evaluate, evaluate_chats, format_chats, format_report
    from chunktree.track.locomo import evaluate_locomo, format_locomo, load_locomo
    from chunktree.track.segmentation import evaluate_segmentation, format_segmentation

    if args.json is not None:
        common.check_output(args, args.json, "--json")
    kind = sniff(args.data) if args.kind == "auto" else args.kind
    if kind == "other":
        kind = "chats" if args.data.suffix == ".jsonl" else "stitched"
    if args.calibrate and kind != "stitched":
        raise InvalidValueError(f"--calibrate searches the threshold rule on CoQA; for {kind} data, fit a decider "
                                "with 'chunktree train-track'")
    if kind == "locomo":
        conversations = load_locomo(args.data)  # the whole file checked before any work
        result = evaluate_locomo(conversations, embedder=common.make_embedder(args), cache=common.open_cache(args),
                                 budgets=tuple(args.budgets), decider=args.decider, seed=args.seed,
                                 progress=common.progress(args))
        print(format_locomo(result, kind_budget=1024 if 1024 in args.budgets else args.budgets[0]))
    elif kind == "segmentation":
        result = evaluate_segmentation(load_segmentation(args.data), common.make_embedder(args), common.open_cache(args),
                                       decider=args.decider, seed=args.seed, progress=common.progress(args))
        print(format_segmentation(result))
    elif kind == "chats":
        result = evaluate_chats(load_labelled(args.data), embedder=common.make_embedder(args), cache=common.open_cache(args),
                                decider=args.decider, seed=args.seed, progress=common.progress(args))
        print(format_chats(result))
    else:
        if args.calibrate:
            result = calibrate(args.data, embedder=common.make_embedder(args), cache=common.open_cache(args),
                               dialogues=args.dialogues, length=args.lengths[0], seed=args.seed,
                               progress=common.progress(args))
            for row in result["top"]:
                print(dumps(row))
        else:
            result = evaluate(args.data, embedder=common.make_embedder(args), cache=common.open_cache(args),
                              dialogues=args.dialogues, lengths=tuple(args.lengths), seed=args.seed,
                              progress=common.progress(args),
                              decider=args.decider)
            print(format_report(result))
    if args.json:
        with replacing(args.json) as f:
            f.write(dumps(result, indent=1))
    return 0


def cmd_train_track(args: argparse.Namespace) -> int:
    from chunktree.track.data import load_labelled
    from chunktree.track.train import fit

    common.check_output(args, args.output, "-o")
    dialogues = [d for path in args.files for d in load_labelled(path)]  # every file read before any work
    decider = fit(dialogues, common.make_embedder(args), common.open_cache(args), hidden=args.hidden, l2=args.l2,
                  threshold=args.threshold, seed=args.seed,
                  info={"data": [str(p) for p in args.files]}, progress=common.progress(args))
    decider.save(args.output)
    hidden = decider.info["hidden"]
    model = f"a network of {hidden} hidden units" if hidden else "a logistic regression"
    if args.hidden and not hidden:
        model += f" (fewer than {MIN_NETWORK_PAIRS:,} pairs: too few for the network)"
    back = decider.return_similarity
    print(f"wrote {args.output}: {model}, fitted on {decider.info['dialogues']} dialogues, {decider.info['pairs']} "
          f"turn-tree pairs ({decider.info['positives']} of the turn's own topic) in {decider.info['fit_seconds']} s; "
          + (f"return similarity {back}" if back is not None else "no return similarity (no dialogue comes back to a "
             "topic: below the threshold a turn opens a new topic)"))
    return 0
