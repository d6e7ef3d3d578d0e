"""What the commands share at run time: the embedder and cache their options make, reading and
chunking the corpus, checking output paths before any work, the line an interrupt ends with, and
the small pieces of printed output."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from chunktree.checks import InvalidValueError
from chunktree.engine.chunking import chunk_documents
from chunktree.engine.documents import iter_documents, sample_documents
from chunktree.engine.markup import shown
from chunktree.engine.results import dumps


def make_embedder(args: argparse.Namespace) -> Any:
    """The ``Embedder`` of ``options.add_embedder_args``' flags (and ``--batch-*`` where the command has them)."""
    from chunktree.models.embedder import Embedder

    batches = {"batch_size": args.batch_size, "batch_tokens": args.batch_tokens} if hasattr(args, "batch_tokens") else {}
    return Embedder(args.model, backend=args.backend, precision=args.precision, threads=args.threads, **batches)


def progress(args: argparse.Namespace) -> bool:
    """Progress on stderr: a bar on a terminal, a plain line every few seconds otherwise."""
    return not args.no_progress


def load_chunks(args: argparse.Namespace) -> tuple[Any, list[Any], float]:
    """Read the corpus, load the embedder, chunk. Returns (embedder, chunks, chunk seconds)."""
    if args.sample == bool(args.paths):
        raise InvalidValueError("give input PATHs or --sample (one of the two)")
    embedder = make_embedder(args)
    t0 = time.perf_counter()
    docs = sample_documents() if args.sample else iter_documents(args.paths, args.include, args.exclude,
                                                                  max_bytes=args.max_input_mb << 20)
    chunks = chunk_documents(docs, embedder.tokenizer, chunk_tokens=chunk_capacity(args, embedder),
                             overlap_tokens=args.overlap, progress=progress(args))
    return embedder, chunks, time.perf_counter() - t0


def chunk_capacity(args: argparse.Namespace, embedder: Any) -> int:
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


def open_cache(args: argparse.Namespace) -> Any:
    """The run's embedding cache (None with --no-cache), remembered with its size for the line an
    interrupt prints (``interrupted``)."""
    from chunktree.engine.cache import EmbeddingCache

    cache = None if args.no_cache else EmbeddingCache(args.cache)
    args.opened_cache = cache, len(cache) if cache is not None else 0
    return cache


def interrupted(args: argparse.Namespace, how: str = "interrupted") -> str:
    """The one line a Ctrl-C (or a SIGTERM: ``how``) ends a command with: what was kept, and how to go on."""
    line = f"chunktree {args.command}: {how}; no file was left half-written (one being written is removed)"
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


# Lines a rendered page does not show: a heading's underline or a rule, a reStructuredText directive
# or comment (".. code-block:: python", ".. _label:"), a field of the page (":orphan:").
_UNSHOWN_LINE = re.compile(r"[ \t]*(?:([=\-~^*#_+`:.'\"])\1{3,}|\.\. [^\n]*|:[\w-]+:)[ \t]*$", re.M)


def snippet(text: str, width: int = 100) -> str:
    """The start of ``text`` on one line as a rendered page shows it: links, roles and emphasis as
    text, without heading underlines, directives and comments."""
    flat = " ".join(shown(_UNSHOWN_LINE.sub("", text)).split())
    return flat[:width] + ("…" if len(flat) > width else "")


def embed_line(embedding: dict[str, Any]) -> str:
    return (f"embed {embedding['seconds']:.2f} s ({embedding['embedded']} embedded, "
            f"{embedding['cache_hits']} from cache, {embedding['backend']} {embedding['precision']})")


def with_chunk_time(doc: dict[str, Any], chunk_s: float) -> dict[str, Any]:
    """The result's dict with the CLI's own stage, chunking, first in its timings."""
    return {**doc, "timings": {"chunk_s": chunk_s, **doc["timings"]}}


def printed_structured(doc: dict[str, Any], fmt: str, rows: str) -> bool:
    """Print ``doc`` as JSON (``json``) or its ``rows`` one per line (``jsonl``); False for text."""
    if fmt == "json":
        print(dumps(doc, indent=1))
    elif fmt == "jsonl":
        for row in doc[rows]:
            print(dumps(row))
    return fmt in ("json", "jsonl")


def corpus_line(chunks: list[Any], params: dict[str, Any] | None = None) -> str:
    line = f"{len(chunks)} chunks from {len({c.source for c in chunks})} source(s)"
    duplicates = (params or {}).get("duplicates")
    return line + (f" ({duplicates} exact duplicates of earlier chunks)" if duplicates else "")


def check_output_folder(out: Path, flag: str = "-o") -> None:
    """Create ``out``'s folder and check it is writable, or say why not (``flag`` names the option)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidValueError(f"{flag} {out}: cannot create the folder {out.parent} ({exc.strerror or exc})") from None
    if not os.access(out.parent, os.W_OK):
        raise InvalidValueError(f"{flag} {out}: the folder {out.parent} is not writable")


def input_paths(args: argparse.Namespace) -> list[Path]:
    """The files and folders the command reads."""
    found = [Path(p) for p in [*(getattr(args, "paths", None) or []), *(getattr(args, "files", None) or [])]]
    for name in ("embeddings", "chunks", "data", "dialogue", "model_dir", "decider"):
        value = getattr(args, name, None)
        if value is not None and value != "thresholds":
            found.append(Path(value))
    return found


def check_output(args: argparse.Namespace, out: Path, flag: str, what: str = "") -> None:
    """Before any work: ``out``'s folder can be written, and ``out`` is neither one of the inputs nor
    any other existing file, unless ``--force``. ``what`` names a file the option implies (a sidecar)."""
    check_output_folder(out, flag)
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
    for given in input_paths(args):
        if given.exists() and ((given.is_dir() and out.resolve().is_relative_to(given.resolve()))
                               or (not given.is_dir() and os.path.samefile(out, given))):
            inside = "" if given.is_file() else " (inside the input folder)"
            raise InvalidValueError(f"{label} is one of the inputs, {given}{inside}: writing it would destroy it. "
                                    "Choose another path (or add --force to replace it anyway)")
    raise InvalidValueError(f"{label} exists, and chunktree replaces no file unasked: choose another path, or add "
                            "--force to replace it")


def check_pictures(args: argparse.Namespace) -> None:
    """Before any work: the plot extra is installed and the picture files can be written."""
    from chunktree.engine import pictures

    html, png = getattr(args, "html", None), getattr(args, "png", None)
    pictures.check_available(html=html is not None, png=png is not None)
    for flag, out in (("--html", html), ("--png", png)):
        if out is not None:
            check_output(args, out, flag)
    if png is not None:
        pictures.check_picture_path(png)


def write_pictures(args: argparse.Namespace, result: Any) -> None:
    for out, write in ((args.html, result.to_html), (args.png, result.to_png)):
        if out is not None:
            write(out)
            print(f"wrote {out}", file=sys.stderr)
