"""The ``chunktree`` command line: the only module that prints.

Each command parses its arguments, calls the library, and prints the result's own ``to_dict()``
(``--format json``) or a summary of it. A ``ChunktreeError`` (bad input, a missing model or extra,
an LLM endpoint that fails) is printed as one line with exit code 2; anything else is a bug and
shows its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from chunktree.checks import ChunktreeError, InvalidValueError, json_loads, require, text
from chunktree.engine.chunking import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP_TOKENS, chunk_documents
from chunktree.engine.documents import MAX_BYTES, READS, iter_documents, sample_documents
from chunktree.engine.order import DEFAULT_K, DEFAULT_STRATEGY, EXACT_MAX_N, METHODS, STRATEGIES
from chunktree.engine.read.extractive import DEFAULT_MEMORY_WEIGHT
from chunktree.engine.results import dumps
from chunktree.engine.scale import DEFAULT_SIZES, SHAPES
from chunktree.files import FolderLock, replacing, replacing_npy
from chunktree.models.backends import BACKENDS, PRECISIONS
from chunktree.models.embedder import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS
from chunktree.models.registry import DEFAULT_MODEL, MODELS
from chunktree.track.learned import DEFAULT_THRESHOLD
from chunktree.track.train import DEFAULT_HIDDEN, DEFAULT_L2, MIN_NETWORK_PAIRS


def _int(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int in [low, high]; argparse names the option in the error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer; got {text!r:.40}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {f'in [{low}, {high}]' if high is not None else f'>= {low}'}; "
                                             f"got {value}")
        return value
    return parse


def _float(low: float, *, above: bool = False, high: float | None = None) -> Callable[[str], float]:
    """An argparse type: a finite number >= low (> low with ``above``), at most ``high``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number; got {text!r:.40}") from None
        if not math.isfinite(value) or value < low or (above and value == low) or (high is not None and value > high):
            allowed = f"{'>' if above else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
            raise argparse.ArgumentTypeError(f"must be a finite number {allowed}; got {text!r:.40}")
        return value
    return parse


def _add_corpus_args(p: argparse.ArgumentParser, model_flag: str = "--model") -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help=f"files or folders (searched recursively). Reads {READS}. In a folder, files that are not "
                        "text (binary, not UTF-8, empty) are skipped and named in a warning")
    p.add_argument("--include", action="append", default=[], metavar="GLOB",
                   help="read only the files in folders whose name or path inside the folder matches GLOB "
                        "(repeatable; '*' also crosses '/'), e.g. --include '*.md' --include 'docs/*'")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="leave out the files in folders that match GLOB (repeatable), e.g. --exclude '*.log'")
    p.add_argument("--sample", action="store_true",
                   help="use the built-in sample corpus (Moby-Dick, public domain)")
    p.add_argument("--max-input-mb", type=_int(1), default=MAX_BYTES >> 20,
                   help="the most text all inputs together may hold, in MiB after decompression (default "
                        "%(default)s); the text takes about five times its size in memory while it is chunked")
    p.add_argument("--chunk-tokens", type=_int(1), default=DEFAULT_CHUNK_TOKENS,
                   help="tokens per chunk, special tokens included (default %(default)s)")
    p.add_argument("--overlap", type=_int(0), default=DEFAULT_OVERLAP_TOKENS,
                   help="tokens shared by consecutive chunks (default %(default)s)")
    _add_embedder_args(p, model_flag)
    p.add_argument("--batch-size", type=_int(1), default=DEFAULT_BATCH_SIZE,
                   help="windows per forward pass at most (default %(default)s)")
    p.add_argument("--batch-tokens", type=_int(1), default=None,
                   help="tokens per forward pass at most, each window padded to the longest of its pass; windows "
                        "are sorted by length and packed up to it (default: "
                        f"{', '.join(f'{n} on {b}' for b, n in DEFAULT_BATCH_TOKENS.items())})")
    _add_cache_args(p)


AUTO_HELP = ("auto: OpenVINO bf16 where the CPU has bf16 units (AVX-512 BF16 or AMX), otherwise OpenVINO fp32; "
             "onnxruntime fp32 where OpenVINO cannot load (with a warning). The path taken and why is in the "
             "output's embedding record.")


def _add_embedder_args(p: argparse.ArgumentParser, model_flag: str = "--model", several: bool = False) -> None:
    """The flags of every command that embeds: model (``several``: repeatable), backend, precision, threads."""
    p.add_argument(model_flag, dest="model", default=None if several else DEFAULT_MODEL.name,
                   action="append" if several else "store",
                   help=f"embedding model: {', '.join(MODELS)} (bundled), a Hugging Face hub id such as "
                        "BAAI/bge-small-en-v1.5 (downloaded into the hub's cache once), a local model folder, or an "
                        ".onnx file from 'chunktree export'; 'chunktree models' lists them (default "
                        f"{DEFAULT_MODEL.name})" + ("; repeat it to serve several, the first the default and the "
                                                    "conversations'; a request's 'model' chooses" if several else ""))
    p.add_argument("--backend", choices=BACKENDS, default="auto",
                   help=f"the runtime that embeds (default %(default)s). {AUTO_HELP}")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="fp32; bf16 (OpenVINO, on a CPU with bf16 units); int8 (the model's quantised graph, on "
                        "onnxruntime); or auto (default %(default)s), as --backend auto says")
    p.add_argument("--threads", type=_int(1), default=None,
                   help="the runtime's threads, whichever backend (default: every physical core)")


def _add_decider_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decider", default=None, metavar="DECIDER.npz|thresholds",
                   help="where turns go: a decider written by 'chunktree train-track', or 'thresholds' for the "
                        "threshold rule (default: the learned decider shipped with chunktree)")


def _embedder(args: argparse.Namespace) -> Any:
    """The ``Embedder`` of ``_add_embedder_args``' flags (and ``--batch-*`` where the command has them)."""
    from chunktree.models.embedder import Embedder

    batches = {"batch_size": args.batch_size, "batch_tokens": args.batch_tokens} if hasattr(args, "batch_tokens") else {}
    return Embedder(args.model, backend=args.backend, precision=args.precision, threads=args.threads, **batches)


def _add_cache_args(p: argparse.ArgumentParser) -> None:
    cache = p.add_mutually_exclusive_group()
    cache.add_argument("--cache", type=Path, default=None,
                       help="embedding cache file (default: embeddings.sqlite in the user cache dir)")
    cache.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")


def _add_picture_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--html", type=Path, default=None, metavar="FILE.html",
                   help=f"also write {what} as an interactive page that opens offline (needs chunktree[plot])")
    p.add_argument("--png", type=Path, default=None, metavar="FILE.png",
                   help=f"also write {what} as a PNG (needs chunktree[plot])")


def _add_ray_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--ray", default=None, metavar="local|ADDRESS",
                   help=f"{what} (needs chunktree[ray]): 'local' starts one on this machine; otherwise the "
                        "address of a running cluster ('auto', or HOST:PORT of `ray start --head`)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chunktree", description="Decide which chunks an LLM sees, and in what order.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    parser.add_argument("--no-progress", action="store_true",
                        help="print no progress on stderr (default: a bar on a terminal, otherwise a plain "
                             "line every CHUNKTREE_PROGRESS_SECONDS seconds, default 10)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("embed", help="chunk files and embed the chunks",
                       description="Chunk the inputs, embed every chunk and write OUT.npy (float32, one row "
                                   "per chunk) and OUT.jsonl (the chunks' text and provenance, same order). "
                                   f"Backend and precision {AUTO_HELP}")
    _add_corpus_args(p)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.npy", help="where to write the vectors")
    _add_ray_arg(p, "embed on a Ray cluster")
    _add_force(p)
    p.set_defaults(func=cmd_embed)

    p = sub.add_parser("order", help="order chunks for a sequential reader (CL-ORDER)",
                       description="Chunk and embed the inputs, build the Chow-Liu (maximum spanning) tree of "
                                   "chunk similarities and print the chunks in reading order with provenance.")
    _add_corpus_args(p)
    p.add_argument("-q", "--query", default=None, help="the question the reader will answer (picks the root)")
    p.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY,
                   help="bfs (CL-ORDER), dfs, guided, dense_tree, runs, or the baselines document and dense "
                        "(default %(default)s)")
    p.add_argument("--root", type=_int(0), default=None, help="start from this chunk id")
    p.add_argument("--method", choices=METHODS, default="auto",
                   help=f"exact (dense Prim's), sparse (top-K graph), or auto: exact up to {EXACT_MAX_N} chunks "
                        "(default %(default)s)")
    p.add_argument("--neighbours", type=_int(1), default=None, metavar="K",
                   help=f"neighbours per chunk in the sparse method's top-K graph (default {DEFAULT_K})")
    p.add_argument("--embeddings", type=Path, default=None, metavar="X.npy",
                   help="order the vectors of 'chunktree embed' instead of reading PATHs (memory-mapped, not "
                        "re-embedded); their chunks come from --chunks")
    p.add_argument("--chunks", type=Path, default=None, metavar="X.jsonl",
                   help="the chunks of --embeddings, one per row (default: X.jsonl beside X.npy; without "
                        "either, chunks are named by their row index)")
    p.add_argument("--memory-budget", type=_float(0.0, above=True), default=None, metavar="MB",
                   help="refuse a run whose planned peak memory passes this many MB: with --embeddings before "
                        "any work, otherwise once the chunks are embedded (default: no limit)")
    p.add_argument("--format", choices=("text", "json", "jsonl"), default="text",
                   help="text: a summary and the first chunks; json: the whole result (what the service's "
                        "/v1/order answers); jsonl: one chunk a line (default %(default)s)")
    p.add_argument("--top", type=_int(1), default=None,
                   help="print only the first N ordered chunks (default: 10 for text, all for json/jsonl)")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="ORDER.npy|OUT.json|OUT.jsonl",
                   help="also write the result to a file: .npy the order alone (int64 chunk ids in reading order, "
                        "for programs), .json or .jsonl as --format json or jsonl would print it, every row "
                        "whatever --top says")
    _add_ray_arg(p, "embed and run the top-K search on a Ray cluster")
    _add_picture_args(p, "a picture of the Chow-Liu tree")
    _add_force(p)
    p.set_defaults(func=cmd_order)

    p = sub.add_parser("select", help="pick representative chunks covering every topic (no query)",
                       description="Chunk and embed the inputs, cluster them with K-means (K = the number of "
                                   "outputs wanted) and print each cluster's representative chunk(s) with provenance.")
    _add_corpus_args(p)
    p.add_argument("-k", "--clusters", default=None,
                   help="number of clusters (outputs wanted), or 'elbow'; default: from --budget-tokens")
    p.add_argument("--per-cluster", type=_int(1), default=1, help="representatives per cluster (default %(default)s)")
    p.add_argument("--budget-tokens", type=_int(1), default=None,
                   help="without -k: as many clusters as the representatives' tokens allow")
    p.add_argument("--balance", action="store_true",
                   help="give small topics a better chance of a cluster of their own")
    p.add_argument("--coverage", action="store_true",
                   help="choose the representatives to cover more distinct topics (facility location over "
                        "fine clusters) instead of one per K-means cluster")
    p.add_argument("--seed", type=_int(0), default=0, help="K-means seed (default %(default)s)")
    p.add_argument("--format", choices=("text", "json", "jsonl"), default="text",
                   help="text: a summary and each cluster's representatives; json: the whole result (what the "
                        "service's /v1/select answers); jsonl: one cluster a line (default %(default)s)")
    _add_picture_args(p, "a map of the clusters")
    _add_force(p)
    p.set_defaults(func=cmd_select)

    p = sub.add_parser("read", help="answer a question with a Chain-of-Agents reader over the ordered chunks",
                       description="Chunk and embed the inputs, order them, and let worker agents pass a bounded "
                                   "memory along the order; a manager answers. Workers are an OpenAI-compatible LLM "
                                   "(--llm-base-url, --model) or the offline extractive reader (--extractive).")
    _add_corpus_args(p, model_flag="--embed-model")
    p.add_argument("-q", "--query", default=None, help="the question (without one: a summary)")
    p.add_argument("--order", choices=STRATEGIES, default=DEFAULT_STRATEGY,
                   help="reading order (default %(default)s)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--extractive", action="store_true", help="the offline extractive reader (no LLM)")
    who.add_argument("--llm-base-url", default=None,
                     help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1 (or CHUNKTREE_LLM_BASE_URL)")
    p.add_argument("--model", dest="llm_model", default=None, help="LLM model name (or CHUNKTREE_LLM_MODEL)")
    p.add_argument("--llm-timeout", type=_float(0.0, above=True), default=120.0,
                   help="seconds an LLM request may take, its reply included (default %(default)s)")
    p.add_argument("--llm-run-timeout", type=_float(0.0, above=True), default=None,
                   help="seconds all LLM requests of the run may take together; past it the read stops with an "
                        "error (default: no bound)")
    p.add_argument("--memory-tokens", type=_int(16), default=512, help="memory budget (default %(default)s)")
    p.add_argument("--memory-weight", type=_float(0.0), default=DEFAULT_MEMORY_WEIGHT,
                   help="extractive reader: weight of similarity to what the memory holds (default %(default)s: "
                        "the query-only reader; see the docs, Read)")
    p.add_argument("--window-tokens", type=_int(1), default=4096, help="LLM context window (default %(default)s)")
    p.add_argument("--trace", type=Path, default=None, help="write one JSON line per worker step here")
    p.add_argument("--evidence", type=_int(0), default=10, metavar="N",
                   help="text format: show the N best evidence items of the memory (default %(default)s)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text: the answer and the evidence in memory; json: the whole result, every worker "
                        "step included (default %(default)s)")
    _add_force(p)
    p.set_defaults(func=cmd_read)

    p = sub.add_parser("eval-order", help="measure whether an order helps a bounded reader (SQuAD or HotpotQA data)",
                       description="For every question of a SQuAD-format JSON or HotpotQA-style JSONL file, order "
                                   "the passage's paragraphs with every strategy, read them with the extractive "
                                   "readers, and report where the gold paragraphs come and what the memory keeps, "
                                   "with 95%% bootstrap intervals and paired differences from document and dense.")
    p.add_argument("data", type=Path, metavar="DATA")
    p.add_argument("--format", choices=("auto", "squad", "hotpot"), default="auto",
                   help="data format; auto: .jsonl is HotpotQA-style, anything else SQuAD (default %(default)s)")
    p.add_argument("--budget", type=_float(0.0, above=True, high=1.0), default=0.1,
                   help="memory as a fraction of each passage (default %(default)s)")
    p.add_argument("--limit", type=_int(1), default=None, help="only the first N questions")
    llm = p.add_argument_group("LLM reader (instead of the extractive readers)")
    llm.add_argument("--llm-base-url", default=None,
                     help="OpenAI-compatible base URL: read with the Chain-of-Agents LLM reader and score "
                          "exact match / F1 (given explicitly: the environment alone does not switch readers)")
    llm.add_argument("--model", dest="llm_model", default=None, help="LLM model name (or CHUNKTREE_LLM_MODEL)")
    llm.add_argument("--concurrency", type=_int(1), default=4, help="reads running at once (default %(default)s)")
    llm.add_argument("--memory-tokens", type=_int(16), default=256, help="memory budget (default %(default)s)")
    llm.add_argument("--window-tokens", type=_int(1), default=4096, help="LLM context window (default %(default)s)")
    llm.add_argument("--llm-cache", type=Path, default=None,
                     help="SQLite cache of LLM calls (default: llm.sqlite in the user cache dir)")
    p.add_argument("--seed", type=_int(0), default=0, help="seed of the random order (default %(default)s)")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    p.add_argument("--html", type=Path, default=None, metavar="FILE.html",
                   help="also write a page that draws, for the first questions, where each order puts the gold "
                        "paragraphs, with the tables (extractive readers only; needs chunktree[plot])")
    _add_embedder_args(p, "--embed-model")
    _add_cache_args(p)
    _add_force(p)
    p.set_defaults(func=cmd_eval_order)

    p = sub.add_parser("track", help="keep a dialogue as a forest of topic trees",
                       description="Place each turn of a dialogue in a forest of topic trees (continue, branch, "
                                   "switch topic, new topic), print every decision and the forest, and optionally "
                                   "the context the last turn would get. DIALOGUE.jsonl: one turn per line, "
                                   "'user' (required), 'assistant' and 'conversation' (optional; one forest each).")
    p.add_argument("dialogue", type=Path, metavar="DIALOGUE.jsonl")
    p.add_argument("--format", choices=("text", "json", "jsonl"), default="text",
                   help="text; json: decisions, forest and context per conversation; jsonl: one decision per line")
    p.add_argument("--budget-tokens", type=_int(1), default=None,
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
    _add_decider_arg(p)
    _add_embedder_args(p)
    _add_cache_args(p)
    _add_force(p)
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
    p.add_argument("--budgets", type=_int(1), nargs="+", default=[256, 512, 1024, 2048, 4096],
                   help="LoCoMo: the context budgets in tokens (default %(default)s)")
    p.add_argument("--dialogues", type=_int(1), default=30, help="stitched dialogues per length (default %(default)s)")
    p.add_argument("--lengths", type=_int(2), nargs="+", default=[20, 40, 80], help="turns per stitched dialogue")
    p.add_argument("--seed", type=_int(0), default=0, help="seed of the stitching (default %(default)s)")
    p.add_argument("--calibrate", action="store_true",
                   help="search the thresholds on the first half of the stories instead of evaluating")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    _add_decider_arg(p)
    _add_embedder_args(p)
    _add_cache_args(p)
    _add_force(p)
    p.set_defaults(func=cmd_eval_track)

    p = sub.add_parser("train-track", help="fit the topic forest's learned decider on dialogues with known topics",
                       description="Fit the learned decider (a small neural network over features of each turn "
                                   "against each tree) on FILES: segmentation files (each segment a topic), CoQA files (dialogues "
                                   "stitched from the first half of the stories, with returns) or JSONL turns with a "
                                   "'topic' each ('user', 'topic', optional 'assistant' and 'conversation'). Use the result "
                                   "with --decider.")
    p.add_argument("files", type=Path, nargs="+", metavar="FILE")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DECIDER.npz")
    p.add_argument("--hidden", type=_int(0), default=DEFAULT_HIDDEN,
                   help="tanh units in the hidden layer; 0 for a logistic regression, which is also what fewer "
                        f"than {MIN_NETWORK_PAIRS:,} turn-tree pairs get (default %(default)s)")
    p.add_argument("--l2", type=_float(0.0), default=DEFAULT_L2, help="L2 regularisation (default %(default)s)")
    p.add_argument("--threshold", type=_float(0.0, high=1.0), default=DEFAULT_THRESHOLD,
                   help="the least probability that keeps a turn in an existing tree (default %(default)s)")
    _add_embedder_args(p)
    _add_cache_args(p)
    _add_force(p)
    p.set_defaults(func=cmd_train_track)

    p = sub.add_parser("scale", help="measure how ordering time and memory grow with n; write a report with plots",
                       description="Order synthetic embedding-like vectors (or subsamples of --embeddings) at each "
                                   "size, each in a fresh process, and write FOLDER/report.md (time per stage, peak "
                                   "memory, recall@16, tree weight against exact, growth exponents, the n at which "
                                   "the budgets run out), scale.json, time.png and memory.png (chunktree[plot]).")
    p.add_argument("--sizes", type=_int(100), nargs="+", default=list(DEFAULT_SIZES), metavar="N",
                   help="chunk counts to measure (default %(default)s)")
    p.add_argument("--embeddings", type=Path, default=None, metavar="X.npy",
                   help="measure random subsamples of these vectors instead of synthetic ones")
    p.add_argument("--topics", type=_int(1), default=100,
                   help="topics of the synthetic vectors, the grain of the data: a few large topics or many small "
                        "ones (more: fuzzier neighbourhoods; default %(default)s)")
    p.add_argument("--shape", choices=SHAPES, default="text",
                   help="the synthetic vectors: 'text', each topic 20 sub-topics over a direction all share, shaped "
                        "like embeddings of real text; 'topics', each row a topic's centre plus noise, topics apart "
                        "(default %(default)s)")
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                   help="the vectors as ordered; float16 takes half the memory, as a float16 .npy given to "
                        "order --embeddings (default %(default)s)")
    p.add_argument("--time-budget", type=_float(0.0, above=True), default=600.0, metavar="SECONDS",
                   help="the longest one ordering run may take; sizes projected past it are left out "
                        "(default %(default)s)")
    p.add_argument("--memory-budget", type=_float(0.0, above=True), default=None, metavar="MB",
                   help="the most memory one run may hold (default: three quarters of this machine's)")
    p.add_argument("--seed", type=_int(0), default=0, help="seed of the data and the K-means (default %(default)s)")
    p.add_argument("-o", "--output", type=Path, default=Path("scale-report"), metavar="FOLDER",
                   help="the report folder (default %(default)s)")
    p.add_argument("--no-plots", action="store_true", help="write the report without the PNG plots")
    _add_force(p)
    p.set_defaults(func=cmd_scale)

    p = sub.add_parser("serve", help="run the HTTP service (OpenAI-compatible embeddings, order, select)",
                       description="Serve POST /v1/embeddings (OpenAI API shape), /v1/order and /v1/select, "
                                   "GET /health and /metrics, with micro-batching of concurrent requests.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s: loopback only)")
    p.add_argument("--port", type=_int(1, 65535), default=8000, help="port (default %(default)s)")
    _add_embedder_args(p, several=True)
    p.add_argument("--api-key-env", default=None, metavar="NAME",
                   help="require 'Authorization: Bearer <key>' with the key read from this environment variable")
    p.add_argument("--max-batch", type=_int(1), default=32, help="texts per model call (default %(default)s)")
    p.add_argument("--max-wait-ms", type=_float(0.0), default=0.0,
                   help="extra wait for other requests to batch with (default %(default)s: batch whatever "
                        "queued while the model was busy)")
    p.add_argument("--no-batching", action="store_true", help="one model call per request")
    p.add_argument("--max-texts", type=_int(1), default=256,
                   help="texts per /v1/embeddings request; more is refused with 413 (default %(default)s)")
    p.add_argument("--max-chunks", type=_int(1), default=10_000,
                   help="texts or vectors per /v1/order and /v1/select request; more is refused with 413 "
                        "(default %(default)s)")
    p.add_argument("--max-body-mb", type=_float(0.0, above=True), default=8.0,
                   help="megabytes (MiB) per request body; more is refused with 413 (default %(default)s). "
                        "As JSON, 1,000 vectors of 384 numbers take about 8 MiB")
    p.add_argument("--max-queue", type=_int(1), default=4096, help="texts waiting before 503 (default %(default)s)")
    p.add_argument("--queue-timeout", type=_float(0.0, above=True), default=10.0, metavar="SECONDS",
                   help="the longest a request waits for the model: one that would wait longer (by the "
                        "measured model rate) gets 503 at once, one still queued after it gets 503 unrun "
                        "(default %(default)s)")
    p.add_argument("--conversations", type=Path, default=None, metavar="DIR",
                   help="keep every conversation's topic forest in DIR (saved after each turn, loaded after an "
                        "eviction or a restart); default: in memory only")
    p.add_argument("--max-conversations", type=_int(1), default=1000,
                   help="conversations held in memory; the least recently used is evicted (default %(default)s)")
    p.add_argument("--max-turns", type=_int(1), default=10_000, help="turns per conversation (default %(default)s)")
    p.add_argument("--max-header-kb", type=_int(1), default=64,
                   help="KiB per request head (request line and headers); more gets 431 (default %(default)s)")
    p.add_argument("--header-timeout", type=_float(0.0, above=True), default=10.0, metavar="SECONDS",
                   help="the longest a client may take to send a request's head; 408 and closed past it "
                        "(default %(default)s)")
    p.add_argument("--body-timeout", type=_float(0.0, above=True), default=60.0, metavar="SECONDS",
                   help="the longest a client may take to send a request's body (default %(default)s)")
    p.add_argument("--max-connections", type=_int(1), default=1000,
                   help="connections open at once, lowered to fit the descriptor limit (ulimit -n); a further one "
                        "gets 503 (default %(default)s)")
    p.add_argument("--shutdown-timeout", type=_float(0.0, above=True), default=10.0, metavar="SECONDS",
                   help="on SIGTERM, the longest requests in flight are waited for (default %(default)s)")
    _add_cache_args(p)
    p.add_argument("--metrics-public", action="store_true",
                   help="leave GET /metrics open when an API key is required (default: it needs the key too)")
    _add_decider_arg(p)
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
    p.add_argument("--window", type=_int(8), default=None,
                   help="tokens per window, at most the model's own (default: its max_seq_length)")
    p.add_argument("--name", default=None, help="model name in the model id (default: the folder's name)")
    _add_force(p)
    p.set_defaults(func=cmd_export)
    return parser


# The library's names of what the user gave as options, so that an error the library raises names
# the option typed (a range that needs the data, such as --root or -k, is checked there).
FLAGS = {"chunk_tokens": "--chunk-tokens", "overlap_tokens": "--overlap", "batch_size": "--batch-size",
         "batch_tokens": "--batch-tokens", "threads": "--threads", "root": "--root", "per_cluster": "--per-cluster",
         "budget_tokens": "--budget-tokens", "memory_tokens": "--memory-tokens", "window_tokens": "--window-tokens",
         "memory_weight": "--memory-weight", "seed": "--seed", "query": "--query", "model": "--model"}
COMMAND_FLAGS = {"order": {"k": "--neighbours"}, "select": {"k": "-k"}, "read": {"model": "--embed-model"},
                 "eval-order": {"model": "--embed-model"}}


def _name_the_option(command: str, message: str) -> str:
    """``message`` with a leading library parameter name replaced by the option that sets it."""
    m = re.match(r"(\w+)(?= must| \()", message)
    flag = m and {**FLAGS, **COMMAND_FLAGS.get(command, {})}.get(m.group(1))
    return flag + message[m.end():] if m and flag else message


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad option (2, argparse's message printed): a code, as below
        return int(exc.code or 0)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a full disk or a closed pipe behind stdout shows here, not at exit
        return code
    except ChunktreeError as exc:
        print(f"chunktree {args.command}: error: {_name_the_option(args.command, str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_interrupted(args), file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader closed the pipe (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # writing an output failed: a full disk, a folder made read-only meanwhile
        where = f": {exc.filename}" if exc.filename else ""
        print(f"chunktree {args.command}: error: {exc.strerror or exc}{where}; the file being written was not kept",
              file=sys.stderr)
        with contextlib.suppress(OSError):  # what stdout still buffers cannot be written either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 2


def _progress(args: argparse.Namespace) -> bool:
    """Progress on stderr: a bar on a terminal, a plain line every few seconds otherwise."""
    return not args.no_progress


def _load_chunks(args: argparse.Namespace) -> tuple[Any, list[Any], float]:
    """Read the corpus, load the embedder, chunk. Returns (embedder, chunks, chunk seconds)."""
    if args.sample == bool(args.paths):
        raise InvalidValueError("give input PATHs or --sample (one of the two)")
    embedder = _embedder(args)
    t0 = time.perf_counter()
    docs = sample_documents() if args.sample else iter_documents(args.paths, args.include, args.exclude,
                                                                  max_bytes=args.max_input_mb << 20)
    chunks = chunk_documents(docs, embedder.tokenizer, chunk_tokens=_chunk_tokens(args, embedder),
                             overlap_tokens=args.overlap, progress=_progress(args))
    return embedder, chunks, time.perf_counter() - t0


def _chunk_tokens(args: argparse.Namespace, embedder: Any) -> int:
    """``--chunk-tokens``, less the model's document prompt where the prompt would push a chunk
    that fits one window into two (said in a warning)."""
    prompt = embedder.prompt("document")
    extra = len(embedder.tokenizer.encode(prompt, add_special_tokens=False).ids) if prompt else 0
    if extra and args.chunk_tokens <= embedder.window < args.chunk_tokens + extra:
        logging.getLogger("chunktree").warning(
            "--chunk-tokens %d plus the model's document prompt %r (%d tokens) passes its %d-token window: chunks "
            "are cut to %d tokens", args.chunk_tokens, prompt, extra, embedder.window, embedder.window - extra)
        return int(embedder.window - extra)
    return int(args.chunk_tokens)


def _open_cache(args: argparse.Namespace) -> Any:
    """The run's embedding cache (None with --no-cache), remembered with its size for the line an
    interrupt prints (``_interrupted``)."""
    from chunktree.engine.cache import EmbeddingCache

    cache = None if args.no_cache else EmbeddingCache(args.cache)
    args.opened_cache = cache, len(cache) if cache is not None else 0
    return cache


def _interrupted(args: argparse.Namespace) -> str:
    """The one line a Ctrl-C ends a command with: what was kept, and how to go on."""
    line = f"chunktree {args.command}: interrupted; no file was left half-written (one being written is removed)"
    if not hasattr(args, "opened_cache"):
        return line
    cache, before = args.opened_cache
    if cache is None:
        return line + "; nothing was kept (--no-cache): the same command starts over"
    try:
        kept = len(cache) - before
    except Exception:  # the cache cannot answer now (a transaction cut by the interrupt): say what is sure
        return line + f"; vectors embedded so far are kept in the cache {cache.path}: the same command resumes from them"
    if kept <= 0:
        return line + "; no new vectors were embedded: the same command starts over"
    return line + f"; the {kept} vector(s) embedded are kept in the cache {cache.path}: the same command resumes from them"


def _snippet(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat[:width] + ("…" if len(flat) > width else "")


def _embed_line(embedding: dict[str, Any]) -> str:
    return (f"embed {embedding['seconds']:.2f} s ({embedding['embedded']} embedded, "
            f"{embedding['cache_hits']} from cache, {embedding['backend']} {embedding['precision']})")


def _with_chunk_time(doc: dict[str, Any], chunk_s: float) -> dict[str, Any]:
    """The result's dict with the CLI's own stage, chunking, first in its timings."""
    return {**doc, "timings": {"chunk_s": chunk_s, **doc["timings"]}}


def _printed_structured(doc: dict[str, Any], fmt: str, rows: str) -> bool:
    """Print ``doc`` as JSON (``json``) or its ``rows`` one per line (``jsonl``); False for text."""
    if fmt == "json":
        print(dumps(doc, indent=1))
    elif fmt == "jsonl":
        for row in doc[rows]:
            print(dumps(row))
    return fmt in ("json", "jsonl")


def _corpus_line(chunks: list[Any], params: dict[str, Any] | None = None) -> str:
    line = f"{len(chunks)} chunks from {len({c.source for c in chunks})} source(s)"
    duplicates = (params or {}).get("duplicates")
    return line + (f" ({duplicates} exact duplicates of earlier chunks)" if duplicates else "")


def _check_output_folder(out: Path, flag: str = "-o") -> None:
    """Create ``out``'s folder and check it is writable, or say why not (``flag`` names the option)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidValueError(f"{flag} {out}: cannot create the folder {out.parent} ({exc.strerror or exc})") from None
    if not os.access(out.parent, os.W_OK):
        raise InvalidValueError(f"{flag} {out}: the folder {out.parent} is not writable")


def _inputs(args: argparse.Namespace) -> list[Path]:
    """The files and folders the command reads."""
    found = [Path(p) for p in [*(getattr(args, "paths", None) or []), *(getattr(args, "files", None) or [])]]
    for name in ("embeddings", "chunks", "data", "dialogue", "model_dir", "decider"):
        value = getattr(args, name, None)
        if value is not None and value != "thresholds":
            found.append(Path(value))
    return found


def _check_output(args: argparse.Namespace, out: Path, flag: str, what: str = "") -> None:
    """Before any work: ``out``'s folder can be written, and ``out`` is neither one of the inputs nor
    any other existing file, unless ``--force``. ``what`` names a file the option implies (a sidecar)."""
    _check_output_folder(out, flag)
    label = f"{flag} {what}{out}"
    if out.is_dir():
        raise InvalidValueError(f"{label} is a folder; give the path of a file")
    if out.exists() and not out.is_file():
        raise InvalidValueError(f"{label} is not a regular file (a device, pipe or socket); give the path of a file")
    claimed = args.__dict__.setdefault("outputs_claimed", {})
    other = claimed.setdefault(out.resolve(), label)
    if other != label:
        raise InvalidValueError(f"{label} is also {other}: two outputs cannot share one path")
    if not (out.exists() or out.is_symlink()) or args.force:
        return
    for given in _inputs(args):
        if given.exists() and ((given.is_dir() and out.resolve().is_relative_to(given.resolve()))
                               or (not given.is_dir() and os.path.samefile(out, given))):
            inside = "" if given.is_file() else " (inside the input folder)"
            raise InvalidValueError(f"{label} is one of the inputs, {given}{inside}: writing it would destroy it. "
                                    "Choose another path (or add --force to replace it anyway)")
    raise InvalidValueError(f"{label} exists, and chunktree replaces no file unasked: choose another path, or add "
                            "--force to replace it")


def _add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="replace output files that exist (without it, the command refuses before any work, and "
                        "always names an output that is one of its inputs)")


def _check_pictures(args: argparse.Namespace) -> None:
    """Before any work: the plot extra is installed and the picture files can be written."""
    from chunktree.engine import pictures

    html, png = getattr(args, "html", None), getattr(args, "png", None)
    pictures.check_available(html=html is not None, png=png is not None)
    for flag, out in (("--html", html), ("--png", png)):
        if out is not None:
            _check_output(args, out, flag)
    if png is not None:
        pictures.check_picture_path(png)


def _write_pictures(args: argparse.Namespace, result: Any) -> None:
    for out, write in ((args.html, result.to_html), (args.png, result.to_png)):
        if out is not None:
            write(out)
            print(f"wrote {out}", file=sys.stderr)


def cmd_embed(args: argparse.Namespace) -> int:
    from chunktree.engine.embedding import embed_texts

    out = args.output if args.output.suffix == ".npy" else args.output.with_suffix(args.output.suffix + ".npy")
    meta = out.with_suffix(".jsonl")
    _check_output(args, out, "-o")  # before any work, not after minutes of embedding
    _check_output(args, meta, "-o", f"{args.output}: its chunks file ")
    embedder, chunks, chunk_s = _load_chunks(args)
    cache = _open_cache(args)
    # The vectors go into a memory map as each batch comes, so a large corpus is not held in memory,
    # with its space reserved first; each file appears whole or not at all (files.replacing), and a
    # run that is stopped resumes through the cache's commits.
    with replacing(meta) as f, replacing_npy(out, (len(chunks), embedder.dim), np.float32) as vectors:
        for c in chunks:
            f.write(dumps(c.to_dict()) + "\n")
        _, stats = embed_texts([c.text for c in chunks], embedder, cache, progress=_progress(args), ray=args.ray,
                               out=vectors, prompt="document")
    print(f"{_corpus_line(chunks)}, model {embedder.model_id} ({embedder.dim} dims)")
    print(f"backend {embedder.backend} {embedder.precision} on {embedder.threads} threads ({embedder.choice.reason})")
    print(f"chunk {chunk_s:.2f} s | {_embed_line(stats.to_dict())}"
          f"{'' if cache is None else ' cache ' + str(cache.path)}")
    print(f"wrote {out} ({len(chunks)} x {embedder.dim} float32) and {meta}")
    return 0


def _embedded(args: argparse.Namespace) -> tuple[np.ndarray, list[Any] | None]:
    """The vectors of --embeddings (memory-mapped) and their chunks, checked against each other.

    The chunks come from --chunks, or from X.jsonl beside X.npy; without either the rows have no
    text and are named by their index (None is returned for the chunks).
    """
    from chunktree.engine.chunking import Chunk

    if args.paths or args.sample:
        raise InvalidValueError("give PATHs, --sample or --embeddings (one of them)")
    try:
        vectors = np.load(args.embeddings, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise InvalidValueError(f"--embeddings {args.embeddings}: not a readable .npy file ({exc})") from None
    if vectors.ndim != 2 or vectors.dtype not in (np.float32, np.float16, np.float64):
        raise InvalidValueError(f"--embeddings {args.embeddings}: need a 2-D float array; got {vectors.dtype} "
                                f"{vectors.shape}")
    chunks_path = args.chunks or args.embeddings.with_suffix(".jsonl")
    if args.chunks is None and not chunks_path.exists():
        return vectors, None
    chunks = []
    try:
        with chunks_path.open(encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                try:
                    chunks.append(Chunk.from_dict(json_loads(line)))
                except ValueError as exc:
                    raise InvalidValueError(f"--chunks {chunks_path}:{line_no}: not a chunk row ({exc})") from None
    except OSError as exc:
        raise InvalidValueError(f"--chunks {chunks_path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InvalidValueError(f"--chunks {chunks_path}: not UTF-8 text ({exc.reason} at byte {exc.start} of a "
                                f"line)") from None
    if len(chunks) != vectors.shape[0]:
        raise InvalidValueError(f"--embeddings {args.embeddings} has {vectors.shape[0]} rows but --chunks "
                                f"{chunks_path} has {len(chunks)} chunks")
    return vectors, chunks


def cmd_order(args: argparse.Namespace) -> int:
    import dataclasses

    from chunktree.engine.order import order

    _check_pictures(args)
    if args.output is not None:
        if args.output.suffix not in (".npy", ".json", ".jsonl"):
            raise InvalidValueError(f"-o {args.output}: the file's suffix says what it holds: .npy (the order), .json "
                                    f"or .jsonl (the result); got {args.output.suffix or 'none'}")
        _check_output(args, args.output, "-o")
    if args.embeddings is not None:
        vectors, chunks = _embedded(args)
        embedder = _embedder(args) if args.query is not None else None
        if embedder is not None and embedder.dim != vectors.shape[1]:
            raise InvalidValueError(f"--embeddings has {vectors.shape[1]} dims but --model {args.model} makes "
                                    f"{embedder.dim}: the query must be embedded by the model that made the file")
        result = order(vectors, args.query, strategy=args.strategy, root=args.root, method=args.method,
                       k=args.neighbours, embedder=embedder, cache=_open_cache(args), ray=args.ray,
                       progress=_progress(args), memory_budget_mb=args.memory_budget)
        if chunks is not None:  # the chunks give the provenance
            result = dataclasses.replace(result, items=chunks)
        chunk_s = 0.0
    else:
        embedder, chunks, chunk_s = _load_chunks(args)
        result = order(chunks, args.query, strategy=args.strategy, root=args.root, method=args.method,
                       k=args.neighbours, embedder=embedder, cache=_open_cache(args), progress=_progress(args),
                       ray=args.ray, memory_budget_mb=args.memory_budget)
    _write_pictures(args, result)
    top = args.top or (10 if args.format == "text" else None)
    result = dataclasses.replace(result, timings={"chunk_s": chunk_s, **result.timings})
    if args.output is not None:
        with replacing(args.output, "wb" if args.output.suffix == ".npy" else "w") as f:
            if args.output.suffix == ".npy":
                np.save(f, result.order.astype(np.int64))
            else:  # streamed: 10 million rows in the memory of one block
                result.write_json(f, lines=args.output.suffix == ".jsonl", progress=_progress(args))
        print(f"wrote {args.output}", file=sys.stderr)
    if args.format in ("json", "jsonl"):
        result.write_json(sys.stdout, top, lines=args.format == "jsonl", progress=_progress(args))
        return 0
    doc = result.to_dict(top=top)
    weight = "" if doc["tree_weight"] is None else f", tree weight {doc['tree_weight']:.2f}"
    corpus = _corpus_line(chunks, doc["params"]) if chunks is not None else f"{doc['n_chunks']} vectors (no chunks file)"
    print(f"{corpus}; strategy {doc['strategy']}, method {doc['method']}{weight}; root chunk {doc['root']}")
    order_s = doc["timings"]["total_s"] - doc["timings"]["embed_s"]
    embed = "embed 0 s (vectors given)" if doc["embedding"] is None else _embed_line(doc["embedding"])
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
            print(f"      {_snippet(row['text'])}")
    return 0


def _parse_k(value: str | None) -> int | str | None:
    if value is None or value == "elbow":
        return value
    try:
        return int(value)
    except ValueError:
        raise InvalidValueError(f"-k must be an int or 'elbow'; got {value!r}") from None


def cmd_select(args: argparse.Namespace) -> int:
    from chunktree.engine.select import select

    k = _parse_k(args.clusters)
    _check_pictures(args)
    embedder, chunks, chunk_s = _load_chunks(args)
    result = select(chunks, k, per_cluster=args.per_cluster, budget_tokens=args.budget_tokens,
                    balance=args.balance, coverage=args.coverage, seed=args.seed, embedder=embedder,
                    cache=_open_cache(args),
                    progress=_progress(args))
    _write_pictures(args, result)
    doc = _with_chunk_time(result.to_dict(), chunk_s)
    if _printed_structured(doc, args.format, "clusters"):
        return 0
    short = [row["size"] for row in doc["clusters"] if row["size"] < args.per_cluster]
    each = (f"{args.per_cluster} representative(s) each" if not short else
            f"up to {args.per_cluster} representative(s) each: --per-cluster {args.per_cluster} is more than "
            f"{len(short)} of the clusters hold ({min(short)}-{max(short)} chunks), so they give all their members")
    print(f"{_corpus_line(chunks, doc['params'])} -> {doc['n_clusters']} clusters (k={doc['k']}), {each}")
    select_s = doc["timings"]["total_s"] - doc["timings"]["embed_s"]
    print(f"time: chunk {chunk_s:.2f} s | {_embed_line(doc['embedding'])} | select {select_s:.3f} s")
    print("(#cluster and #chunk ids and [start:end] character offsets count from 0, as in --format json; "
          "distance: Euclidean, of unit vectors, to the cluster's centre (0 the same, 1.41 unrelated)"
          f"{'; under --coverage the centre is the first representative' * args.coverage})")
    for row in doc["clusters"]:
        print(f"cluster #{row['cluster']}: {row['size']} chunks, mean distance {row['mean_distance']:.3f}")
        for j, rep in enumerate(row["representatives"]):
            heading = f" [{rep['heading']}]" if rep["heading"] else ""
            where = "the centre" if args.coverage and j == 0 else f"distance {rep['distance']:.3f}"
            print(f"   #{rep['id']} {rep['source']} [{rep['start']}:{rep['end']}]{heading} "
                  f"{where}\n      {_snippet(rep['text'])}")
    if isinstance(k, int):
        _hint_k(result, k, args.seed)
    return 0


def _hint_k(result: Any, k: int, seed: int) -> None:
    """A hint when the data's own K (the bend of the K-means inertia curve, on at most 5,000 chunks)
    is larger than the K asked for: some clusters then hold several subjects."""
    from chunktree.engine.select import elbow_k

    x = result.vectors
    if x is None or x.shape[0] <= k + 1:
        return
    if x.shape[0] > 5_000:
        x = x[np.random.default_rng(seed).choice(x.shape[0], 5_000, replace=False)]
    suggested, _ = elbow_k(x, max(2, int(2 * np.sqrt(x.shape[0]))), seed)
    if suggested > k:
        print(f"hint: the chunks fall into about {suggested} groups (the bend of the K-means curve, -k elbow); with "
              f"-k {k} some clusters hold several subjects (the largest mean distances above). Raise -k to separate "
              "them, or keep it for fewer, broader outputs.")


def cmd_read(args: argparse.Namespace) -> int:
    from chunktree.engine.read import ChatClient, read

    if args.trace is not None:
        _check_output(args, args.trace, "--trace")
    llm = None
    if not args.extractive:
        if not (args.llm_base_url or os.environ.get("CHUNKTREE_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")):
            raise InvalidValueError("give --extractive (no LLM) or --llm-base-url URL (or set CHUNKTREE_LLM_BASE_URL)")
        llm = ChatClient(args.llm_base_url, args.llm_model, timeout=args.llm_timeout, run_timeout=args.llm_run_timeout)
    embedder, chunks, chunk_s = _load_chunks(args)
    result = read(chunks, args.query, strategy=args.order, llm=llm, memory_tokens=args.memory_tokens,
                  memory_weight=args.memory_weight,
                  window_tokens=args.window_tokens, embedder=embedder, cache=_open_cache(args), trace=args.trace,
                  progress=_progress(args))
    doc = _with_chunk_time(result.to_dict(), chunk_s)
    if _printed_structured(doc, args.format, "steps"):
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
            print(f"  {rank}. {where}: {_snippet(str(item.get('quote', '')), 120)}")
    if args.trace:
        print(f"\ntrace: {args.trace}")
    return 0


def cmd_eval_order(args: argparse.Namespace) -> int:
    from chunktree.engine.evaluate import evaluate_orders, format_report, load
    from chunktree.engine.evaluate.data import Passage

    if args.html is not None and (args.llm_base_url or args.llm_model):
        raise InvalidValueError("--html draws the extractive evaluation; leave out --llm-base-url/--model")
    _check_pictures(args)
    if args.json is not None:
        _check_output(args, args.json, "--json")
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
        result = evaluate_llm(passages, _embedder(args), llm, _open_cache(args), memory_tokens=args.memory_tokens,
                              window_tokens=args.window_tokens, concurrency=args.concurrency, progress=_progress(args))
        print(format_llm_report(result))
    else:
        result = evaluate_orders(passages, _embedder(args), _open_cache(args), budget=args.budget,
                                 seed=args.seed, progress=_progress(args))
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



def cmd_track(args: argparse.Namespace) -> int:
    from chunktree.track import Forest
    from chunktree.track.forest import conversation_file, read_dialogue

    if args.query is not None:
        text(args.query, "--query")
    conversations = read_dialogue(args.dialogue, file_ids=args.save is not None)  # every line checked before work
    if args.save is not None:
        files = {name: conversation_file(args.save, name) for name in conversations}
        for name, file in files.items():
            _check_output(args, file, "--save", f"(conversation {name!r}) ")
    # one writer per folder, as the service's: a server or another run on it is refused before any work
    with FolderLock(args.save, "chunktree track --save") if args.save is not None else contextlib.nullcontext():
        llm = None
        if args.llm_base_url or args.llm_model:
            from chunktree.engine.read import ChatClient

            llm = ChatClient(args.llm_base_url, args.llm_model)
        embedder, cache = _embedder(args), _open_cache(args)
        out: dict[str, Any] = {}
        for name, turns in conversations.items():
            forest = Forest(embedder, cache=cache, llm=llm, decider=args.decider)
            decisions = []
            for index, (user, assistant, _) in enumerate(turns):
                d = forest.add(user, assistant)
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
                        print(f"  {m['role']}: {_snippet(m['content'], 160)}")
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
        _check_output(args, args.json, "--json")
    kind = sniff(args.data) if args.kind == "auto" else args.kind
    if kind == "other":
        kind = "chats" if args.data.suffix == ".jsonl" else "stitched"
    if args.calibrate and kind != "stitched":
        raise InvalidValueError(f"--calibrate searches the threshold rule on CoQA; for {kind} data, fit a decider "
                                "with 'chunktree train-track'")
    if kind == "locomo":
        conversations = load_locomo(args.data)  # the whole file checked before any work
        result = evaluate_locomo(conversations, embedder=_embedder(args), cache=_open_cache(args),
                                 budgets=tuple(args.budgets), decider=args.decider, seed=args.seed,
                                 progress=_progress(args))
        print(format_locomo(result, kind_budget=1024 if 1024 in args.budgets else args.budgets[0]))
    elif kind == "segmentation":
        result = evaluate_segmentation(load_segmentation(args.data), _embedder(args), _open_cache(args),
                                       decider=args.decider, seed=args.seed, progress=_progress(args))
        print(format_segmentation(result))
    elif kind == "chats":
        result = evaluate_chats(load_labelled(args.data), embedder=_embedder(args), cache=_open_cache(args),
                                decider=args.decider, seed=args.seed, progress=_progress(args))
        print(format_chats(result))
    else:
        if args.calibrate:
            result = calibrate(args.data, embedder=_embedder(args), cache=_open_cache(args), dialogues=args.dialogues,
                               length=args.lengths[0], seed=args.seed, progress=_progress(args))
            for row in result["top"]:
                print(dumps(row))
        else:
            result = evaluate(args.data, embedder=_embedder(args), cache=_open_cache(args), dialogues=args.dialogues,
                              lengths=tuple(args.lengths), seed=args.seed, progress=_progress(args),
                              decider=args.decider)
            print(format_report(result))
    if args.json:
        with replacing(args.json) as f:
            f.write(dumps(result, indent=1))
    return 0


def cmd_train_track(args: argparse.Namespace) -> int:
    from chunktree.track.data import load_labelled
    from chunktree.track.train import fit

    _check_output(args, args.output, "-o")
    dialogues = [d for path in args.files for d in load_labelled(path)]  # every file read before any work
    decider = fit(dialogues, _embedder(args), _open_cache(args), hidden=args.hidden, l2=args.l2,
                  threshold=args.threshold,
                  info={"data": [str(p) for p in args.files]}, progress=_progress(args))
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


def cmd_scale(args: argparse.Namespace) -> int:
    from chunktree.engine.scale import sweep, write_report

    if not args.no_plots:
        require("matplotlib", "plot", "the plots of chunktree scale (or give --no-plots)")
    for name in ("report.md", "scale.json", "time.png", "memory.png"):
        _check_output(args, args.output / name, "-o", f"{args.output}: ")
    result = sweep(args.sizes, embeddings=args.embeddings, shape=args.shape, topics=args.topics, seed=args.seed,
                   time_budget_s=args.time_budget, memory_budget_mb=args.memory_budget, dtype=args.dtype,
                   say=(lambda m: print(m, file=sys.stderr, flush=True)) if _progress(args) else (lambda m: None))
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
    from chunktree.track.forest import load_decider

    # A bad file fails before the model loads; None stays None: the shipped decider, if it fits the model.
    decider = None if args.decider is None else load_decider(args.decider) or "thresholds"
    names = args.model or [DEFAULT_MODEL.name]
    if args.conversations is not None:  # a folder another server holds fails before the model loads, too
        _check_output_folder(args.conversations / "x", "--conversations")  # the folder made and writable
        FolderLock(args.conversations, "chunktree serve").release()  # create_app takes it for good
    embedders = [_embedder(argparse.Namespace(**{**vars(args), "model": name})) for name in names]
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

    _check_output(args, args.output, "-o")
    report = export_model(args.model_dir, args.output, window=args.window, name=args.name)
    print(f"wrote {args.output}: model id {report.model_id}, window {report.window}, dim {report.dim}, "
          f"{report.pooling} pooling")
    return 0
