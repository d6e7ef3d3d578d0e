"""``chunktree embed`` (chunks and their vectors to a file) and ``chunktree order`` (the reading order)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.apps.cli import common, options
from chunktree.checks import InvalidValueError
from chunktree.engine.order import DEFAULT_K, DEFAULT_STRATEGY, EXACT_MAX_N, METHODS, STRATEGIES
from chunktree.files import replacing


def register(sub: Any) -> None:
    """The embed and order commands."""
    p = sub.add_parser("embed", help="chunk files and embed the chunks",
                       description="Chunk the inputs, embed every chunk and write OUT.npy (float32, one row "
                                   "per chunk) and OUT.jsonl (the chunks' text and provenance, same order). "
                                   f"Backend and precision {options.AUTO_HELP}")
    options.add_corpus_args(p)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.npy", help="where to write the vectors")
    options.add_ray_arg(p, "embed on a Ray cluster")
    options.add_force(p)
    p.set_defaults(func=cmd_embed)

    p = sub.add_parser("order", help="order chunks for a sequential reader (CL-ORDER)",
                       description="Chunk and embed the inputs, build the Chow-Liu (maximum spanning) tree of "
                                   "chunk similarities and print the chunks in reading order with provenance.")
    options.add_corpus_args(p)
    p.add_argument("-q", "--query", default=None, help="the question the reader will answer (picks the root)")
    p.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY,
                   help="bfs (CL-ORDER), dfs, guided, dense_tree, runs, or the baselines document and dense "
                        "(default %(default)s)")
    p.add_argument("--root", type=options.int_in(0), default=None, help="start from this chunk id")
    p.add_argument("--method", choices=METHODS, default="auto",
                   help=f"exact (dense Prim's), sparse (top-K graph), or auto: exact up to {EXACT_MAX_N} chunks "
                        "(default %(default)s)")
    p.add_argument("--neighbours", type=options.int_in(1), default=None, metavar="K",
                   help=f"neighbours per chunk in the sparse method's top-K graph (default {DEFAULT_K})")
    p.add_argument("--embeddings", type=Path, default=None, metavar="X.npy",
                   help="order the vectors of 'chunktree embed' instead of reading PATHs (memory-mapped, not "
                        "re-embedded); their chunks come from --chunks")
    p.add_argument("--chunks", type=Path, default=None, metavar="X.jsonl",
                   help="the chunks of --embeddings, one per row (default: X.jsonl beside X.npy; without "
                        "either, chunks are named by their row index)")
    p.add_argument("--memory-budget", type=options.float_in(0.0, above=True), default=None, metavar="MB",
                   help="refuse a run whose planned peak memory passes this many MB: with --embeddings before "
                        "any work, otherwise once the chunks are embedded (default: no limit)")
    p.add_argument("--format", choices=("text", "json", "jsonl"), default="text",
                   help="text: a summary and the first chunks; json: the whole result (what the service's "
                        "/v1/order answers); jsonl: one chunk a line (default %(default)s)")
    p.add_argument("--top", type=options.int_in(1), default=None,
                   help="print only the first N ordered chunks (default: 10 for text, all for json/jsonl)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="ORDER.npy|OUT.json|OUT.jsonl",
                   help="also write the result to a file: .npy the order alone (int64 chunk ids in reading order, "
                        "for programs), .json or .jsonl as --format json or jsonl would print it, every row "
                        "whatever --top says")
    options.add_ray_arg(p, "embed and run the top-K search on a Ray cluster")
    options.add_picture_args(p, "a picture of the Chow-Liu tree")
    options.add_force(p)
    p.set_defaults(func=cmd_order)


def cmd_embed(args: argparse.Namespace) -> int:
    from chunktree.engine.embeddings_file import chunks_path, write_embeddings

    out = args.output if args.output.suffix == ".npy" else args.output.with_suffix(args.output.suffix + ".npy")
    meta = chunks_path(out)
    common.check_output(args, out, "-o")  # before any work, not after minutes of embedding
    common.check_output(args, meta, "-o", f"{args.output}: its chunks file ")
    embedder, chunks, chunk_s = common.load_chunks(args)
    cache = common.open_cache(args)
    stats = write_embeddings(chunks, out, embedder, cache, progress=common.progress(args), ray=args.ray)
    print(f"{common.corpus_line(chunks)}, model {embedder.model_id} ({embedder.dim} dims)")
    print(f"backend {embedder.backend} {embedder.precision} on {embedder.threads} threads ({embedder.choice.reason})")
    print(f"chunk {chunk_s:.2f} s | {common.embed_line(stats.to_dict())}"
          f"{'' if cache is None else ' cache ' + str(cache.path)}")
    print(f"wrote {out} ({len(chunks)} x {embedder.dim} float32) and {meta}")
    return 0


def cmd_order(args: argparse.Namespace) -> int:
    import dataclasses

    from chunktree.engine.order import order

    common.check_pictures(args)
    if args.output is not None:
        if args.output.suffix not in (".npy", ".json", ".jsonl"):
            raise InvalidValueError(f"-o {args.output}: the file's suffix says what it holds: .npy (the order), .json "
                                    f"or .jsonl (the result); got {args.output.suffix or 'none'}")
        common.check_output(args, args.output, "-o")
    if args.embeddings is not None:
        from chunktree.engine.embeddings_file import load_embeddings

        if args.paths or args.sample:
            raise InvalidValueError("give PATHs, --sample or --embeddings (one of them)")
        vectors, chunks = load_embeddings(args.embeddings, args.chunks)
        embedder = common.make_embedder(args) if args.query is not None else None
        if embedder is not None and embedder.dim != vectors.shape[1]:
            raise InvalidValueError(f"--embeddings has {vectors.shape[1]} dims but --model {args.model} makes "
                                    f"{embedder.dim}: the query must be embedded by the model that made the file")
        result = order(vectors, args.query, strategy=args.strategy, root=args.root, method=args.method,
                       k=args.neighbours, embedder=embedder, cache=common.open_cache(args), ray=args.ray,
                       progress=common.progress(args), memory_budget_mb=args.memory_budget, items=chunks)
        chunk_s = 0.0
    else:
        embedder, chunks, chunk_s = common.load_chunks(args)
        result = order(chunks, args.query, strategy=args.strategy, root=args.root, method=args.method,
                       k=args.neighbours, embedder=embedder, cache=common.open_cache(args), progress=common.progress(args),
                       ray=args.ray, memory_budget_mb=args.memory_budget)
    common.write_pictures(args, result)
    top = args.top or (10 if args.format == "text" else None)
    result = dataclasses.replace(result, timings={"chunk_s": chunk_s, **result.timings})
    if args.output is not None:
        with replacing(args.output, "wb" if args.output.suffix == ".npy" else "w") as f:
            if args.output.suffix == ".npy":
                np.save(f, result.order.astype(np.int64))
            else:  # streamed: 10 million rows in the memory of one block
                result.write_json(f, lines=args.output.suffix == ".jsonl", progress=common.progress(args))
        print(f"wrote {args.output}", file=sys.stderr)
    if args.format in ("json", "jsonl"):
        result.write_json(sys.stdout, top, lines=args.format == "jsonl", progress=common.progress(args))
        return 0
    doc = result.to_dict(top=top)
    weight = "" if doc["tree_weight"] is None else f", tree weight {doc['tree_weight']:.2f}"
    corpus = common.corpus_line(chunks, doc["params"]) if chunks is not None else f"{doc['n_chunks']} vectors (no chunks file)"
    print(f"{corpus}; strategy {doc['strategy']}, method {doc['method']}{weight}; root chunk {doc['root']}")
    order_s = doc["timings"]["total_s"] - doc["timings"]["embed_s"]
    embed = "embed 0 s (vectors given)" if doc["embedding"] is None else common.embed_line(doc["embedding"])
    print(f"time: chunk {chunk_s:.2f} s | {embed} | order {order_s:.3f} s")
    print(f"first {len(doc['chunks'])} of {doc['n_chunks']} in reading order (numbered from 1; #chunk ids and "
          "[start:end] character offsets count from 0, as in --format json):")
    for row in doc["chunks"]:
        parts = [f"#{row['id']}"]
        if row["source"] is not None:
            parts.append(f"{row['source']} [{row['start']}:{row['end']}]")
        # "tree parent", not "after": under dense_tree a chunk can come before its parent in the tree.
        if row["parent"] is not None:
            parts.append(f"tree parent #{row['parent']} (sim {row['parent_similarity']:.3f})")
        elif row["id"] == doc["root"] and doc["tree_weight"] is not None:  # document and dense build no tree
            parts.append("root")
        qs = "" if row["query_similarity"] is None else f", query sim {row['query_similarity']:.3f}"
        print(f"{row['position'] + 1:>4}. {' '.join(parts)}{qs}")
        if row["text"] is not None:
            print(f"      {common.snippet(row['text'])}")
    return 0
