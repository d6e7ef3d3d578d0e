"""``chunktree``'s entry point: the parser of every command, and how a command ends.

Each command parses its arguments, calls the library, and prints the result's own ``to_dict()``
(``--format json``) or a summary of it. A ``ChunktreeError`` (bad input, a missing model or extra,
an LLM endpoint that fails) is printed as one line with exit code 2, naming the option the user
typed for the parameter the library names (``ChunktreeError.param``); anything else is a bug and
shows its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator

from chunktree.apps.cli import common, order, read, select, tools, track
from chunktree.checks import ChunktreeError

COMMANDS = (order, select, read, track, tools)  # in the order --help lists them


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chunktree", description="Decide which chunks an LLM sees, and in what order.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    parser.add_argument("--no-progress", action="store_true",
                        help="print no progress on stderr (default: a bar on a terminal, otherwise a plain "
                             "line every CHUNKTREE_PROGRESS_SECONDS seconds, default 10)")
    sub = parser.add_subparsers(dest="command", required=True)
    for commands in COMMANDS:
        commands.register(sub)
    return parser


# The library's names of what the user gave as options, so that an error the library raises names
# the option typed (a range that needs the data, such as --root or -k, is checked there).
FLAGS = {"chunk_tokens": "--chunk-tokens", "overlap_tokens": "--overlap", "batch_size": "--batch-size",
         "batch_tokens": "--batch-tokens", "threads": "--threads", "root": "--root", "per_cluster": "--per-cluster",
         "budget_tokens": "--budget-tokens", "memory_tokens": "--memory-tokens", "window_tokens": "--window-tokens",
         "memory_weight": "--memory-weight", "seed": "--seed", "query": "--query", "model": "--model",
         "embeddings": "--embeddings", "chunks": "--chunks"}
COMMAND_FLAGS = {"order": {"k": "--neighbours"}, "select": {"k": "-k"}, "read": {"model": "--embed-model"},
                 "eval-order": {"model": "--embed-model"}}


def _name_the_option(command: str, exc: ChunktreeError) -> str:
    """The error's message, its leading parameter name (``exc.param``, as in ``root (a chunk
    index) must ...``) replaced by the option that sets it."""
    message, name = str(exc), (exc.param or "").split(" ")[0]
    flag = {**FLAGS, **COMMAND_FLAGS.get(command, {})}.get(name)
    return flag + message[len(name):] if flag and message.startswith(name) else message


class Terminated(BaseException):
    """SIGTERM (``kill``, a job scheduler, ``timeout``), raised where the command runs so that it ends
    as a Ctrl-C does: what is being written is removed, and one line says what was kept."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def _terminable(command: str) -> Iterator[None]:
    """SIGTERM raises ``Terminated`` inside the block. Not for ``serve``, which stops on SIGTERM in
    its own way (requests in flight finish), nor off the main thread, where no handler can be set."""
    if command == "serve" or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad option (2, argparse's message printed): a code, as below
        return int(exc.code or 0)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    # trafilatura warns of its own fallbacks on a page ("readability_lxml failed"); what matters to the
    # user, a page without text, chunktree reports itself.
    logging.getLogger("trafilatura").setLevel(logging.INFO if args.verbose else logging.ERROR)
    with _terminable(args.command):
        try:
            code = int(args.func(args) or 0)
            sys.stdout.flush()  # a full disk or a closed pipe behind stdout shows here, not at exit
            return code
        except ChunktreeError as exc:
            print(f"chunktree {args.command}: error: {_name_the_option(args.command, exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(common.interrupted(args), file=sys.stderr)
            return 130
        except Terminated:
            print(common.interrupted(args, "terminated (SIGTERM)"), file=sys.stderr)
            return 128 + signal.SIGTERM
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
