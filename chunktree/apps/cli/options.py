"""The options several commands share, each declared once: the corpus and its chunking, the embedder,
the cache, pictures, Ray, --force; and the argparse types that check a number where it is typed."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from chunktree.engine.chunking import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP_TOKENS
from chunktree.engine.documents import MAX_BYTES, READS
from chunktree.models.backends import BACKENDS, PRECISIONS
from chunktree.models.embedder import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS
from chunktree.models.registry import DEFAULT_MODEL, MODELS


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
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


def float_in(low: float, *, above: bool = False, high: float | None = None) -> Callable[[str], float]:
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


def add_corpus_args(p: argparse.ArgumentParser, model_flag: str = "--model") -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help=f"files or folders (searched recursively). Reads {READS}; text that is not UTF-8 with "
                        "the charset detected, said in a warning. In a folder, files that are not text (binary, "
                        "empty) or hold no prose (SVG images, JSON data, minified or lock files) are skipped and "
                        "named in a warning")
    p.add_argument("--include", action="append", default=[], metavar="GLOB",
                   help="read only the files in folders whose name or path inside the folder matches GLOB "
                        "(repeatable; '*' also crosses '/'), e.g. --include '*.md' --include 'docs/*'")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="leave out the files in folders that match GLOB (repeatable), e.g. --exclude '*.log'")
    p.add_argument("--sample", action="store_true",
                   help="use the built-in sample corpus (Moby-Dick, public domain)")
    p.add_argument("--max-input-mb", type=int_in(1), default=MAX_BYTES >> 20,
                   help="the most text all inputs together may hold, in MiB after decompression (default "
                        "%(default)s); the text takes about five times its size in memory while it is chunked")
    p.add_argument("--chunk-tokens", type=int_in(1), default=DEFAULT_CHUNK_TOKENS,
                   help="tokens per chunk, special tokens included (default %(default)s)")
    p.add_argument("--overlap", type=int_in(0), default=DEFAULT_OVERLAP_TOKENS,
                   help="tokens shared by consecutive chunks (default %(default)s)")
    add_embedder_args(p, model_flag)
    p.add_argument("--batch-size", type=int_in(1), default=DEFAULT_BATCH_SIZE,
                   help="windows per forward pass at most (default %(default)s)")
    p.add_argument("--batch-tokens", type=int_in(1), default=None,
                   help="tokens per forward pass at most, each window padded to the longest of its pass; windows "
                        "are sorted by length and packed up to it (default: "
                        f"{', '.join(f'{n} on {b}' for b, n in DEFAULT_BATCH_TOKENS.items())})")
    add_cache_args(p)


AUTO_HELP = ("auto: OpenVINO bf16 where the CPU has bf16 units (AVX-512 BF16 or AMX), otherwise OpenVINO fp32; "
             "onnxruntime fp32 where OpenVINO cannot load (with a warning). The path taken and why is in the "
             "output's embedding record.")


def add_embedder_args(p: argparse.ArgumentParser, model_flag: str = "--model", several: bool = False) -> None:
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
    p.add_argument("--threads", type=int_in(1), default=None,
                   help="the runtime's threads, whichever backend (default: every physical core)")


def add_decider_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decider", default=None, metavar="DECIDER.npz|thresholds",
                   help="where turns go: a decider written by 'chunktree train-track', or 'thresholds' for the "
                        "threshold rule (default: the learned decider shipped with chunktree)")


def add_cache_args(p: argparse.ArgumentParser) -> None:
    cache = p.add_mutually_exclusive_group()
    cache.add_argument("--cache", type=Path, default=None,
                       help="embedding cache file (default: embeddings.sqlite in the user cache dir)")
    cache.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")


def add_picture_args(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--html", type=Path, default=None, metavar="FILE.html",
                   help=f"also write {what} as an interactive page that opens offline (needs chunktree[plot])")
    p.add_argument("--png", type=Path, default=None, metavar="FILE.png",
                   help=f"also write {what} as a PNG (needs chunktree[plot])")


def add_ray_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--ray", default=None, metavar="local|ADDRESS",
                   help=f"{what} (needs chunktree[ray]): 'local' starts one on this machine; otherwise the "
                        "address of a running cluster ('auto', or HOST:PORT of `ray start --head`)")


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="replace output files that exist (without it, the command refuses before any work, and "
                        "always names an output that is one of its inputs)")
