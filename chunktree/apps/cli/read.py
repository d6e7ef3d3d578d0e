"""``chunktree read`` (a Chain-of-Agents reader over the order) and ``chunktree eval-order`` (whether an order helps one)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from chunktree.apps.cli import common, options
from chunktree.checks import InvalidValueError
from chunktree.engine.order import DEFAULT_STRATEGY, STRATEGIES
from chunktree.engine.read.extractive import DEFAULT_MEMORY_WEIGHT
from chunktree.engine.results import dumps
from chunktree.files import replacing


def register(sub: Any) -> None:
    """The read and eval-order commands."""
    p = sub.add_parser("read", help="answer a question with a Chain-of-Agents reader over the ordered chunks",
                       description="Chunk and embed the inputs, order them, and let worker agents pass a bounded "
                                   "memory along the order; a manager answers. Workers are an OpenAI-compatible LLM "
                                   "(--llm-base-url, --model) or the offline extractive reader (--extractive).")
    options.add_corpus_args(p, model_flag="--embed-model")
    p.add_argument("-q", "--query", default=None, help="the question (without one: a summary)")
    p.add_argument("--order", choices=STRATEGIES, default=DEFAULT_STRATEGY,
                   help="reading order (default %(default)s)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--extractive", action="store_true", help="the offline extractive reader (no LLM)")
    who.add_argument("--llm-base-url", default=None,
                     help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1 (or CHUNKTREE_LLM_BASE_URL)")
    p.add_argument("--model", dest="llm_model", default=None, help="LLM model name (or CHUNKTREE_LLM_MODEL)")
    p.add_argument("--llm-timeout", type=options.float_in(0.0, above=True), default=120.0,
                   help="seconds an LLM request may take, its reply included (default %(default)s)")
    p.add_argument("--llm-run-timeout", type=options.float_in(0.0, above=True), default=None,
                   help="seconds all LLM requests of the run may take together; past it the read stops with an "
                        "error (default: no bound)")
    p.add_argument("--memory-tokens", type=options.int_in(16), default=512, help="memory budget (default %(default)s)")
    p.add_argument("--memory-weight", type=options.float_in(0.0), default=DEFAULT_MEMORY_WEIGHT,
                   help="extractive reader: weight of similarity to what the memory holds (default %(default)s: "
                        "the query-only reader; see the docs, Read)")
    p.add_argument("--window-tokens", type=options.int_in(1), default=4096, help="LLM context window (default %(default)s)")
    p.add_argument("--trace", type=Path, default=None, help="write one JSON line per worker step here")
    p.add_argument("--evidence", type=options.int_in(0), default=10, metavar="N",
                   help="text format: show the N best evidence items of the memory (default %(default)s)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: the answer and the evidence in memory; json: the whole result, every worker "
                        "step included (default %(default)s)")
    options.add_force(p)
    p.set_defaults(func=cmd_read)

    p = sub.add_parser("eval-order", help="measure whether an order helps a bounded reader (SQuAD or HotpotQA data)",
                       description="For every question of a SQuAD-format JSON or HotpotQA-style JSONL file, order "
                                   "the passage's paragraphs with every strategy, read them with the extractive "
                                   "readers, and report where the gold paragraphs come and what the memory keeps, "
                                   "with 95%% bootstrap intervals and paired differences from document and dense.")
    p.add_argument("data", type=Path, metavar="DATA")
    p.add_argument("--format", choices=("auto", "squad", "hotpot"), default="auto",
                   help="data format; auto: .jsonl is HotpotQA-style, anything else SQuAD (default %(default)s)")
    p.add_argument("--budget", type=options.float_in(0.0, above=True, high=1.0), default=0.1,
                   help="memory as a fraction of each passage (default %(default)s)")
    p.add_argument("--limit", type=options.int_in(1), default=None, help="only the first N questions")
    llm = p.add_argument_group("LLM reader (instead of the extractive readers)")
    llm.add_argument("--llm-base-url", default=None,
                     help="OpenAI-compatible base URL: read with the Chain-of-Agents LLM reader and score "
                          "exact match / F1 (given explicitly: the environment alone does not switch readers)")
    llm.add_argument("--model", dest="llm_model", default=None, help="LLM model name (or CHUNKTREE_LLM_MODEL)")
    llm.add_argument("--concurrency", type=options.int_in(1), default=4, help="reads running at once (default %(default)s)")
    llm.add_argument("--memory-tokens", type=options.int_in(16), default=256, help="memory budget (default %(default)s)")
    llm.add_argument("--window-tokens", type=options.int_in(1), default=4096, help="LLM context window (default %(default)s)")
    llm.add_argument("--llm-cache", type=Path, default=None,
                     help="SQLite cache of LLM calls (default: llm.sqlite in the user cache dir)")
    p.add_argument("--seed", type=options.int_in(0), default=0, help="seed of the random order (default %(default)s)")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    p.add_argument("--html", type=Path, default=None, metavar="FILE.html",
                   help="also write a page that draws, for the first questions, where each order puts the gold "
                        "paragraphs, with the tables (extractive readers only; needs chunktree[plot])")
    options.add_embedder_args(p, "--embed-model")
    options.add_cache_args(p)
    options.add_force(p)
    p.set_defaults(func=cmd_eval_order)


def cmd_read(args: argparse.Namespace) -> int:
    from chunktree.engine.read import ChatClient, read

    if args.trace is not None:
        common.check_output(args, args.trace, "--trace")
    llm = None
    if not args.extractive:
        if not (args.llm_base_url or os.environ.get("CHUNKTREE_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")):
            raise InvalidValueError("give --extractive (no LLM) or --llm-base-url URL (or set CHUNKTREE_LLM_BASE_URL)")
        llm = ChatClient(args.llm_base_url, args.llm_model, timeout=args.llm_timeout, run_timeout=args.llm_run_timeout)
    embedder, chunks, chunk_s = common.load_chunks(args)
    result = read(chunks, args.query, strategy=args.order, llm=llm, memory_tokens=args.memory_tokens,
                  memory_weight=args.memory_weight,
                  window_tokens=args.window_tokens, embedder=embedder, cache=common.open_cache(args), trace=args.trace,
                  progress=common.progress(args))
    doc = common.with_chunk_time(result.to_dict(), chunk_s)
    if common.printed_structured(doc, args.format, "steps"):
        return 0
    who = "extractive reader" if llm is None else f"LLM {llm.model} at {llm.base_url}"
    print(f"{len(chunks)} chunks, order {args.order}, {len(result.steps)} worker steps ({who}), "
          f"{len(result.failures)} failed; chunk {chunk_s:.2f} s, read {doc['timings']['total_s']:.2f} s")
    empty = "(no whole sentence in the chunks to quote: see the docs, Read)" if llm is None else "(empty)"
    print(f"\nanswer:\n{result.answer or empty}")
    evidence = result.memory.get("evidence", [])
    if evidence:
        shown = evidence[:args.evidence]
        print(f"\nevidence in memory ({len(shown)} of {len(evidence)} shown, best first; --evidence N shows more; "
              "#chunk id and [start:end] character offsets count from 0, as in --format json):")
        for rank, item in enumerate(shown, 1):
            i = item.get("chunk")
            c = chunks[i] if isinstance(i, int) and 0 <= i < len(chunks) else None
            start, end = (item["start"], item["end"]) if "start" in item else (c.start, c.end) if c else (None, None)
            where = f"#{i} {c.source} [{start}:{end}]" if c else f"#{i}"
            print(f"  {rank}. {where}: {common.snippet(str(item.get('quote', '')), 120)}")
    if args.trace:
        print(f"\ntrace: {args.trace}")
    return 0


def cmd_eval_order(args: argparse.Namespace) -> int:
    from chunktree.engine.evaluate import evaluate_orders, format_report, load
    from chunktree.engine.evaluate.data import Passage

    if args.html is not None and (args.llm_base_url or args.llm_model):
        raise InvalidValueError("--html draws the extractive evaluation; leave out --llm-base-url/--model")
    common.check_pictures(args)
    if args.json is not None:
        common.check_output(args, args.json, "--json")
    fmt, passages = load(args.data, args.format)
    if args.limit is not None:  # the first N questions, passage by passage
        kept, left = [], args.limit
        for passage in passages:
            if left <= 0:
                break
            kept.append(Passage(passage.paragraphs, passage.questions[:left]))
            left -= len(kept[-1].questions)
        passages = kept
    if args.llm_base_url or args.llm_model:
        from chunktree.engine.evaluate.llm_eval import CachedChat, evaluate_llm, format_llm_report
        from chunktree.engine.read import ChatClient

        llm = CachedChat(ChatClient(args.llm_base_url, args.llm_model), args.llm_cache)
        result = evaluate_llm(passages, common.make_embedder(args), llm, common.open_cache(args), memory_tokens=args.memory_tokens,
                              window_tokens=args.window_tokens, concurrency=args.concurrency, progress=common.progress(args))
        print(format_llm_report(result))
    else:
        result = evaluate_orders(passages, common.make_embedder(args), common.open_cache(args), budget=args.budget,
                                 seed=args.seed, progress=common.progress(args))
        report = format_report(result, fmt)
        print(report)
        if args.html is not None:
            from chunktree.engine.pictures import eval_html

            print(f"\nwrote {eval_html(result, report, args.html)}")
    if args.json:
        with replacing(args.json) as f:
            f.write(dumps({k: v for k, v in result.items() if k != "records"}, indent=1))
        print(f"\nwrote {args.json}")
    return 0
