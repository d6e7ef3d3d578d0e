"""``chunktree select``: representative chunks of every topic."""

from __future__ import annotations

import argparse
from typing import Any

from chunktree.apps.cli import common, options
from chunktree.checks import InvalidValueError


def register(sub: Any) -> None:
    """The select command."""
    p = sub.add_parser("select", help="pick representative chunks covering every topic (no query)",
                       description="Chunk and embed the inputs, cluster them with K-means (K = the number of "
                                   "outputs wanted) and print each cluster's representative chunk(s) with provenance.")
    options.add_corpus_args(p)
    p.add_argument("-k", "--clusters", default=None,
                   help="number of clusters (outputs wanted), or 'elbow'; default: from --budget-tokens")
    p.add_argument("--per-cluster", type=options.int_in(1), default=1, help="representatives per cluster (default %(default)s)")
    p.add_argument("--budget-tokens", type=options.int_in(1), default=None,
                   help="without -k: as many clusters as the representatives' tokens allow")
    p.add_argument("--balance", action="store_true",
                   help="give small topics a better chance of a cluster of their own")
    p.add_argument("--coverage", action="store_true",
                   help="choose the representatives to cover more distinct topics (facility location over "
                        "fine clusters) instead of one per K-means cluster")
    p.add_argument("--seed", type=options.int_in(0), default=0, help="K-means seed (default %(default)s)")
    p.add_argument("--format", choices=("text", "json", "jsonl"), default="text",
                   help="text: a summary and each cluster's representatives; json: the whole result (what the "
                        "service's /v1/select answers); jsonl: one cluster a line (default %(default)s)")
    options.add_picture_args(p, "a map of the clusters")
    options.add_force(p)
    p.set_defaults(func=cmd_select)


def _parse_k(value: str | None) -> int | str | None:
    if value is None or value == "elbow":
        return value
    try:
        return int(value)
    except ValueError:
        raise InvalidValueError(f"-k must be an int or 'elbow'; got {value!r}") from None


def cmd_select(args: argparse.Namespace) -> int:
    from chunktree.engine.select import more_groups, select

    k = _parse_k(args.clusters)
    common.check_pictures(args)
    embedder, chunks, chunk_s = common.load_chunks(args)
    result = select(chunks, k, per_cluster=args.per_cluster, budget_tokens=args.budget_tokens,
                    balance=args.balance, coverage=args.coverage, seed=args.seed, embedder=embedder,
                    cache=common.open_cache(args),
                    progress=common.progress(args))
    common.write_pictures(args, result)
    doc = common.with_chunk_time(result.to_dict(), chunk_s)
    if common.printed_structured(doc, args.format, "clusters"):
        return 0
    short = [row["size"] for row in doc["clusters"] if row["size"] < args.per_cluster]
    each = (f"{args.per_cluster} representative(s) each" if not short else
            f"up to {args.per_cluster} representative(s) each: --per-cluster {args.per_cluster} is more than "
            f"{len(short)} of the clusters hold ({min(short)}-{max(short)} chunks), so they give all their members")
    print(f"{common.corpus_line(chunks, doc['params'])} -> {doc['n_clusters']} clusters (k={doc['k']}), {each}")
    select_s = doc["timings"]["total_s"] - doc["timings"]["embed_s"]
    print(f"time: chunk {chunk_s:.2f} s | {common.embed_line(doc['embedding'])} | select {select_s:.3f} s")
    print("(#cluster and #chunk ids and [start:end] character offsets count from 0, as in --format json; "
          "distance: Euclidean, of unit vectors, to the cluster's centre (0 the same, 1.41 unrelated)"
          f"{'; under --coverage the centre is the first representative' * args.coverage})")
    for row in doc["clusters"]:
        print(f"cluster #{row['cluster']}: {row['size']} chunks, mean distance {row['mean_distance']:.3f}")
        for j, rep in enumerate(row["representatives"]):
            heading = f" [{rep['heading']}]" if rep["heading"] else ""
            where = "the centre" if args.coverage and j == 0 else f"distance {rep['distance']:.3f}"
            print(f"   #{rep['id']} {rep['source']} [{rep['start']}:{rep['end']}]{heading} "
                  f"{where}\n      {common.snippet(rep['text'])}")
    suggested = more_groups(result.vectors, k, args.seed) if isinstance(k, int) else None
    if suggested is not None:
        print(f"hint: the chunks fall into about {suggested} groups (the bend of the K-means curve, -k elbow); with "
              f"-k {k} some clusters hold several subjects (the largest mean distances above). Raise -k to separate "
              "them, or keep it for fewer, broader outputs.")
    return 0
