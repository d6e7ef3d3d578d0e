"""Progress for long work: where its lines go, a tqdm bar on a terminal, plain lines otherwise.

Every long function of chunktree takes ``progress`` (``Progress``): False says nothing; True
shows a bar on a terminal and otherwise writes plain lines on stderr, such as
``embed: 1.2M/3.0M char (40%), 31 s, about 47 s left``, every ``CHUNKTREE_PROGRESS_SECONDS``
seconds (default 10); a callable gets each of those lines instead (a logger's ``info``, a
service's own sink), and nothing is written. Lines estimate the time left from the work done so
far, in the unit given (characters, texts, steps), so give the unit that the cost grows with.
This module is the one place the library writes to stderr.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO, TypeVar

INTERVAL_ENV = "CHUNKTREE_PROGRESS_SECONDS"
T = TypeVar("T")
Progress = bool | Callable[[str], None]


def say(progress: Progress, line: str) -> None:
    """One line of progress: given to ``progress`` when it is a callable, written on stderr when it
    is True, dropped when it is False."""
    if callable(progress):
        progress(line)
    elif progress:
        print(line, file=sys.stderr, flush=True)


def progress(total: int, desc: str, unit: str, *, enabled: Progress = True, file: TextIO | None = None) -> Any:
    """A progress counter with ``update(n)``, ``set_postfix_str(s)`` and ``close()``.

    ``enabled=False`` gives one that says nothing, a callable one that gives it each plain line.
    Otherwise the choice between a bar and plain lines follows ``file`` (default ``sys.stderr``):
    a bar only on a terminal.
    """
    file = sys.stderr if file is None else file
    if not enabled:
        return _Silent()
    if callable(enabled):
        return PlainProgress(total, desc, unit, say=enabled)
    if file.isatty():
        from tqdm.auto import tqdm

        return tqdm(total=total or None, desc=desc, unit=unit, unit_scale=True, delay=1.0, file=file)
    return PlainProgress(total, desc, unit, file=file)


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass


def _count(n: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{suffix}"
    return f"{n:g}"


class PlainProgress:
    """Says ``desc: done/total unit (pct), elapsed, about T left`` at most every ``interval``
    seconds: to ``say``, or as a line on ``file``."""

    def __init__(self, total: int, desc: str, unit: str, *, file: TextIO | None = None,
                 say: Callable[[str], None] | None = None, interval: float | None = None) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.say = say or (lambda line: print(line, file=file or sys.stderr, flush=True))
        self.interval = float(os.environ.get(INTERVAL_ENV, 10)) if interval is None else interval
        self.done = 0
        self.postfix = ""
        self._start = self._last = time.monotonic()
        self._shown: tuple[int, str] | None = None  # what the last printed line said

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._print(now)

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s

    def close(self) -> None:
        now = time.monotonic()
        # A run long enough to have shown lines ends with one, unless the last line said it all.
        if now - self._start >= self.interval and self._shown != (self.done, self.postfix):
            self._print(now)

    def _print(self, now: float) -> None:
        elapsed = now - self._start
        line = f"{self.desc}: {_count(self.done)}{'/' + _count(self.total) if self.total else ''} {self.unit}"
        if self.total:
            line += f" ({100 * self.done / self.total:.0f}%)"
        line += f", {elapsed:.0f} s"
        if 0 < self.done < self.total:
            line += f", about {elapsed * (self.total - self.done) / self.done:.0f} s left"
        if self.postfix:
            line += f", {self.postfix}"
        self.say(line)
        self._shown = (self.done, self.postfix)


def tracked(items: Iterable[T], total: int, desc: str, unit: str, *, enabled: Progress = True) -> Iterator[T]:
    """Yield ``items``, counting one ``unit`` each (see ``progress``)."""
    bar = progress(total, desc, unit, enabled=enabled)
    try:
        for item in items:
            yield item
            bar.update(1)
    finally:
        bar.close()
