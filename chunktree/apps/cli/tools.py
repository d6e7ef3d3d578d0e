"""``chunktree scale`` (the scale limits), ``serve`` (the HTTP service), ``models`` and ``export``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from chunktree.apps.cli import common, options
from chunktree.apps.scale import DEFAULT_SIZES
from chunktree.checks import InvalidValueError, require
from chunktree.engine.datasets import SHAPES
from chunktree.engine.results import dumps
from chunktree.files import FolderLock
from chunktree.models.registry import DEFAULT_MODEL


def register(sub: Any) -> None:
    """The scale, serve, models and export commands."""
    p = sub.add_parser("scale", help="measure how ordering time and memory grow with n; write a report with plots",
                       description="Order synthetic embedding-like vectors (or subsamples of --embeddings) at each "
                                   "size, each in a fresh process, and write FOLDER/report.md (time per stage, peak "
                                   "memory, recall@16, tree weight against exact, growth exponents, the n at which "
                                   "the budgets run out), scale.json, time.png and memory.png (chunktree[plot]).")
    p.add_argument("--sizes", type=options.int_in(100), nargs="+", default=list(DEFAULT_SIZES), metavar="N",
                   help="chunk counts to measure (default %(default)s)")
    p.add_argument("--embeddings", type=Path, default=None, metavar="X.npy",
                   help="measure random subsamples of these vectors instead of synthetic ones")
    p.add_argument("--topics", type=options.int_in(1), default=100,
                   help="topics of the synthetic vectors, the grain of the data: a few large topics or many small "
                        "ones (more: fuzzier neighbourhoods; default %(default)s)")
    p.add_argument("--shape", choices=SHAPES, default="text",
                   help="the synthetic vectors: 'text', each topic 20 sub-topics over a direction all share, shaped "
                        "like embeddings of real text; 'topics', each row a topic's centre plus noise, topics apart "
                        "(default %(default)s)")
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                   help="the vectors as ordered; float16 takes half the memory, as a float16 .npy given to "
                        "order --embeddings (default %(default)s)")
    p.add_argument("--time-budget", type=options.float_in(0.0, above=True), default=600.0, metavar="SECONDS",
                   help="the longest one ordering run may take; sizes projected past it are left out "
                        "(default %(default)s)")
    p.add_argument("--memory-budget", type=options.float_in(0.0, above=True), default=None, metavar="MB",
                   help="the most memory one run may hold (default: three quarters of this machine's)")
    p.add_argument("--seed", type=options.int_in(0), default=0, help="seed of the data and the K-means (default %(default)s)")
    p.add_argument("-o", "--output", type=Path, default=Path("scale-report"), metavar="FOLDER",
                   help="the report folder (default %(default)s)")
    p.add_argument("--no-plots", action="store_true", help="write the report without the PNG plots")
    options.add_force(p)
    p.set_defaults(func=cmd_scale)

    p = sub.add_parser("serve", help="run the HTTP service (OpenAI-compatible embeddings, order, select)",
                       description="Serve POST /v1/embeddings (OpenAI API shape), /v1/order and /v1/select, "
                                   "GET /health and /metrics, with micro-batching of concurrent requests.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s: loopback only)")
    p.add_argument("--port", type=options.int_in(1, 65535), default=8000, help="port (default %(default)s)")
    options.add_embedder_args(p, several=True)
    p.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="require 'Authorization: Bearer <key>' with the key read from this environment variable")
    p.add_argument("--max-batch", type=options.int_in(1), default=32, help="texts per model call (default %(default)s)")
    p.add_argument("--max-wait-ms", type=options.float_in(0.0), default=0.0,
                   help="extra wait for other requests to batch with (default %(default)s: batch whatever "
                        "queued while the model was busy)")
    p.add_argument("--no-batching", action="store_true", help="one model call per request")
    p.add_argument("--max-texts", type=options.int_in(1), default=256,
                   help="texts per /v1/embeddings request; more is refused with 413 (default %(default)s)")
    p.add_argument("--max-chunks", type=options.int_in(1), default=10_000,
                   help="texts or vectors per /v1/order and /v1/select request; more is refused with 413 "
                        "(default %(default)s)")
    p.add_argument("--max-body-mb", type=options.float_in(0.0, above=True), default=8.0,
                   help="megabytes (MiB) per request body; more is refused with 413 (default %(default)s). "
                        "As JSON, 1,000 vectors of 384 numbers take about 8 MiB")
    p.add_argument("--max-queue", type=options.int_in(1), default=4096, help="texts waiting before 503 (default %(default)s)")
    p.add_argument("--queue-timeout", type=options.float_in(0.0, above=True), default=10.0, metavar="SECONDS",
                   help="the longest a request waits for the model: one that would wait longer (by the "
                        "measured model rate) gets 503 at once, one still queued after it gets 503 unrun "
                        "(default %(default)s)")
    p.add_argument("--conversations", type=Path, default=None, metavar="DIR",
                   help="keep every conversation's topic forest in DIR (saved after each turn, loaded after an "
                        "eviction or a restart); default: in memory only")
    p.add_argument("--max-conversations", type=options.int_in(1), default=1000,
                   help="conversations held in memory; the least recently used is evicted (default %(default)s)")
    p.add_argument("--max-turns", type=options.int_in(1), default=10_000, help="turns per conversation (default %(default)s)")
    p.add_argument("--max-header-kb", type=options.int_in(1), default=64,
                   help="KiB per request head (request line and headers); more gets 431 (default %(default)s)")
    p.add_argument("--header-timeout", type=options.float_in(0.0, above=True), default=10.0, metavar="SECONDS",
                   help="the longest a client may take to send a request's head; 408 and closed past it "
                        "(default %(default)s)")
    p.add_argument("--body-timeout", type=options.float_in(0.0, above=True), default=60.0, metavar="SECONDS",
                   help="the longest a client may take to send a request's body (default %(default)s)")
    p.add_argument("--max-connections", type=options.int_in(1), default=1000,
                   help="connections open at once, lowered to fit the descriptor limit (ulimit -n); a further one "
                        "gets 503 (default %(default)s)")
    p.add_argument("--shutdown-timeout", type=options.float_in(0.0, above=True), default=10.0, metavar="SECONDS",
                   help="on SIGTERM, the longest requests in flight are waited for (default %(default)s)")
    options.add_cache_args(p)
    p.add_argument("--metrics-public", action="store_true",
                   help="leave GET /metrics open when an API key is required (default: it needs the key too)")
    options.add_decider_arg(p)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("models", help="list the embedding models chunktree knows and has built on this machine",
                       description="The bundled models, and every model built on this machine from a folder or "
                                   "a Hugging Face hub id, with dimension, window, pooling and prompts.")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default %(default)s)")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("export", help="write a model folder's ONNX graph to a file usable as --model",
                       description="Write the ONNX graph of a sentence-transformers / Hugging Face model folder "
                                   "(BERT, RoBERTa, XLM-RoBERTa, MPNet), built from its safetensors weights with "
                                   "its pooling, prompts, window and tokenizer inside, to a file usable as --model.")
    p.add_argument("model_dir", type=Path, metavar="MODEL_DIR")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.onnx")
    p.add_argument("--window", type=options.int_in(8), default=None,
                   help="tokens per window, at most the model's own (default: its max_seq_length)")
    p.add_argument("--name", default=None, help="model name in the model id (default: the folder's name)")
    options.add_force(p)
    p.set_defaults(func=cmd_export)


def cmd_scale(args: argparse.Namespace) -> int:
    from chunktree.apps.scale import sweep
    from chunktree.apps.scale_report import write_report

    if not args.no_plots:
        require("matplotlib", "plot", "the plots of chunktree scale (or give --no-plots)")
    for name in ("report.md", "scale.json", "time.png", "memory.png"):
        common.check_output(args, args.output / name, "-o", f"{args.output}: ")
    result = sweep(args.sizes, embeddings=args.embeddings, shape=args.shape, topics=args.topics, seed=args.seed,
                   time_budget_s=args.time_budget, memory_budget_mb=args.memory_budget, dtype=args.dtype,
                   say=(lambda m: print(m, file=sys.stderr, flush=True)) if common.progress(args) else (lambda m: None))
    for path in write_report(result, args.output, plots=not args.no_plots):
        print(f"wrote {path}")
    print((args.output / "report.md").read_text(encoding="utf-8"))
    if result.failed or not result.sizes:
        print(f"chunktree scale: {result.stopped}" + ("" if result.sizes else "; no size was measured"),
              file=sys.stderr)
        return 1
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    uvicorn = require("uvicorn", "serve", "chunktree serve")
    from chunktree.apps.serve import Limits, create_app, server

    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise InvalidValueError(f"--api-key-env {args.api_key_env}: that environment variable is not set or empty")
    limits = Limits(max_texts=args.max_texts, max_chunks=args.max_chunks, max_body=int(args.max_body_mb * 2**20),
                    max_queue=args.max_queue, max_batch=args.max_batch,
                    max_wait_ms=args.max_wait_ms, batching=not args.no_batching, queue_timeout_s=args.queue_timeout,
                    max_conversations=args.max_conversations, max_turns=args.max_turns,
                    max_header_kb=args.max_header_kb, header_timeout_s=args.header_timeout,
                    body_timeout_s=args.body_timeout, max_connections=args.max_connections,
                    shutdown_timeout_s=args.shutdown_timeout)
    from chunktree.track.learned import load_decider

    # A bad file fails before the model loads; None stays None: the shipped decider, if it fits the model.
    decider = None if args.decider is None else load_decider(args.decider) or "thresholds"
    names = args.model or [DEFAULT_MODEL.name]
    if args.conversations is not None:  # a folder another server holds fails before the model loads, too
        common.check_output_folder(args.conversations / "x", "--conversations")  # the folder made and writable
        FolderLock(args.conversations, "chunktree serve").release()  # create_app takes it for good
    embedders = [common.make_embedder(argparse.Namespace(**{**vars(args), "model": name})) for name in names]
    embedder = embedders[0]
    from chunktree.paths import cache_dir

    cache = None if args.no_cache else args.cache or cache_dir() / "embeddings.sqlite"
    app = create_app(embedder, api_key=api_key, limits=limits, metrics_public=args.metrics_public,
                     conversations_dir=args.conversations, decider=decider, cache=cache, others=embedders[1:])
    served = ", ".join(e.model_id for e in embedders)
    print(f"chunktree serve: {served} ({embedder.backend} {embedder.precision}) on http://{args.host}:{args.port} "
          f"(batching {'off' if args.no_batching else f'<= {args.max_batch} texts, {args.max_wait_ms} ms'}"
          f"{', API key required' if api_key else ''}; embedding cache {cache or 'off'})", flush=True)
    uvicorn.Server(server.config(app, limits, args.host, args.port, log_level="warning")).run()
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from chunktree.models.registry import list_models

    rows = list_models()
    if args.format == "json":
        print(dumps({"models": rows}, indent=1))
        return 0
    for row in rows:
        if "dim" not in row:
            print(f"{row['name']}  [{row['source']}] {row['state']}")
            continue
        prompts = ", ".join(f"{k}: {v!r}" for k, v in row["prompts"].items()) or "none"  # type: ignore[attr-defined]
        print(f"{row['name']}  [{row['source']}] dim {row['dim']}, window {row['window']}, {row['pooling']} pooling, "
              f"prompts {prompts}; {row['state']}")
    print("any other: --model ORG/NAME (a Hugging Face hub id) or --model FOLDER; see the docs, Models")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from chunktree.models.export import export_model

    common.check_output(args, args.output, "-o")
    report = export_model(args.model_dir, args.output, window=args.window, name=args.name)
    print(f"wrote {args.output}: model id {report.model_id}, window {report.window}, dim {report.dim}, "
          f"{report.pooling} pooling")
    return 0
