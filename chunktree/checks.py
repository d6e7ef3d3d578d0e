"""chunktree's errors and the argument checks every layer shares.

Everything chunktree raises on purpose derives from ``ChunktreeError``, so an application (the
CLI, the service) can tell a user's mistake from a bug: it reports a ``ChunktreeError`` in one
line and lets anything else show its traceback. A wrong type is an ``InvalidTypeError`` (a
``TypeError``), a wrong value an ``InvalidValueError`` (a ``ValueError``); each message names the
parameter, the bad value and what is allowed, e.g. ``k must be in [1, n_chunks=812]; got 0``.

This module sits below ``kernels``, ``models`` and ``engine``: it imports nothing of chunktree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

import numpy as np


class ChunktreeError(Exception):
    """Base of every error chunktree raises for bad input or an unusable environment.

    ``param`` is the name of the argument the message begins with, where it begins with one, so
    that an application can name its own option for it (the CLI prints ``--chunk-tokens`` for
    ``chunk_tokens``) without reading the message.
    """

    def __init__(self, message: str = "", *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class InvalidValueError(ChunktreeError, ValueError):
    """An argument has the right type but a value outside what is allowed."""


class InvalidTypeError(ChunktreeError, TypeError):
    """An argument has the wrong type."""


class MissingExtraError(ChunktreeError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def require(module: str, extra: str, what: str) -> Any:
    """Import ``module`` or raise ``MissingExtraError`` naming ``pip install 'chunktree[extra]'``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(f"{what} needs the {module!r} package: pip install 'chunktree[{extra}]'") from exc


def is_int(value: Any) -> bool:
    """True for Python and NumPy ints; False for bools (``True`` is not a count)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def integer(value: Any, name: str, low: int | None = None, high: int | None = None, *,
            high_name: str | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (either bound optional).

    ``high_name`` names what the upper bound is (``"n_chunks"`` gives ``[1, n_chunks=812]``).
    """
    if not is_int(value):
        raise InvalidTypeError(f"{name} must be an int; got {value!r:.80} ({type(value).__name__})", param=name)
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            allowed = f">= {low}"
        else:
            top = f"{high_name}={high}" if high_name else str(high)
            allowed = f"in [{low if low is not None else '-inf'}, {top}]"
        raise InvalidValueError(f"{name} must be {allowed}; got {value!r:.80}", param=name)
    return int(value)


def positive_int(value: Any, name: str) -> int:
    """``value`` as an int >= 1."""
    return integer(value, name, 1)


def optional_positive_int(value: Any, name: str) -> int | None:
    """None, or an int >= 1."""
    return None if value is None else positive_int(value, name)


def number(value: Any, name: str, low: float | None = None, high: float | None = None, *,
           low_open: bool = False) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidTypeError(f"{name} must be a number; got {value!r:.80} ({type(value).__name__})", param=name)
    v = float(value)
    below = low is not None and (v <= low if low_open else v < low)
    if not np.isfinite(v) or below or (high is not None and v > high):
        if high is None:
            allowed = "finite" if low is None else f"{'>' if low_open else '>='} {low}"
        else:
            allowed = f"in {'(' if low_open else '['}{low if low is not None else '-inf'}, {high}]"
        raise InvalidValueError(f"{name} must be a number {allowed}; got {value!r:.80}", param=name)
    return v


SEED_MAX = 2**63 - 1  # seeds are int64: they go into JSON results and numpy generators as such


def one_of(value: Any, name: str, allowed: Collection[Any]) -> Any:
    """``value`` if it is one of ``allowed``."""
    if value not in allowed:
        raise InvalidValueError(f"{name} must be one of {list(allowed)}; got {value!r:.80}", param=name)
    return value


# Any character a reader sees: not a space, a zero-width or direction mark, or a control character.
_VISIBLE = re.compile(r"[^\s\x00-\x1f\x7f-\x9f\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]")


def visible(value: str) -> bool:
    """Whether ``value`` holds a character a reader sees (not only spaces, zero-width or control
    characters, which every model embeds as the empty text)."""
    return _VISIBLE.search(value) is not None


def text(value: Any, name: str, *, allow_empty: bool = False) -> str:
    """``value`` as a string; blank strings (nothing ``visible``) are refused unless
    ``allow_empty``, and so is a string that is not valid Unicode (``unicode``)."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a string; got {type(value).__name__}", param=name)
    if not allow_empty and not visible(value):
        raise InvalidValueError(f"{name} must hold visible text, not only spaces, zero-width or control characters; "
                                f"got {value!r:.80}", param=name)
    return unicode(value, name)


def json_loads(text: str | bytes) -> Any:
    """``json.loads``, with JSON nested past the parser's depth a ``ValueError`` like any other
    unreadable JSON (not a ``RecursionError``), so that every reader names its input alike."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to be read") from None


def unicode(value: str, name: str) -> str:
    """``value``, refused when it holds a lone surrogate (``"\\ud800"``, from a JSON escape or a
    bad decode): such a string cannot be written as UTF-8, so no tokenizer can take it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValueError(f"{name} is not valid Unicode: a lone surrogate {value[exc.start]!r} at character "
                                f"{exc.start} ({value[max(0, exc.start - 20):exc.start]!r} before it)", param=name) from None
    return value


# Rows whose L2 norm is within this of 1 are taken as unit rows and not renormalised (float32
# normalisation leaves norms within about 1e-7 of 1).
UNIT_TOLERANCE = 1e-6
# The same for float16 rows: rounding each value to float16 moves a unit row's norm by about 1e-4.
UNIT_TOLERANCE_F16 = 2e-3
# A stored vector (the embedding cache's, a saved forest's) was unit when written: past this, the
# file was damaged.
STORED_UNIT_TOLERANCE = 1e-3
NORM_FLOOR = 1e-12  # ``normalised`` divides by at least this: a zero vector stays zero


def normalised(x: np.ndarray) -> np.ndarray:
    """``x`` scaled to unit L2 norm along its last axis (a vector, or each row of a matrix), in
    ``x``'s float type; a zero vector stays zero. The one normalisation of the package, bar
    ``unit_rows``, which also checks and works a block at a time."""
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), NORM_FLOOR)


def is_unit(x: np.ndarray, tolerance: float = UNIT_TOLERANCE) -> np.ndarray:
    """Whether each vector along the last axis of ``x`` is finite with an L2 norm within
    ``tolerance`` of 1 (a bool, or one per row)."""
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x)
    clean = np.where(finite, x, 0.0)
    return finite.all(axis=-1) & (np.abs(np.sqrt(np.einsum("...i,...i->...", clean, clean)) - 1.0) <= tolerance)


def check_array(x: Any, name: str = "X") -> np.ndarray:
    """``x`` as a C-contiguous float32 (n, d) array of finite values."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        raise InvalidTypeError(f"{name} must be a numeric array; got dtype {arr.dtype}", param=name)
    if arr.ndim != 2:
        raise InvalidValueError(f"{name} must be a 2-D array (n, d); got shape {arr.shape}", param=name)
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    _finite(arr, name)
    return arr


def _finite(arr: np.ndarray, name: str, first_row: int = 0) -> None:
    """Refuse non-finite values, naming the first one's index (rows counted from ``first_row``)."""
    if not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise InvalidValueError(f"{name} must be finite; found {arr[tuple(bad)]} at index "
                                f"{(int(bad[0]) + first_row, *(int(b) for b in bad[1:]))}", param=name)


def unit_rows(x: Any, name: str, block: int = 65536, keep_float16: bool = False) -> np.ndarray:
    """``x``'s rows scaled to unit L2 norm, as C-contiguous float32 (n, d), checked block by block
    (``check_array``'s rules; zero rows are an error) with scratch of one block.

    Rows that are already float32, C-contiguous and of unit norm (within ``UNIT_TOLERANCE``; what
    ``chunktree embed`` writes) are returned as a read-only view, not copied: a memory-mapped
    ``.npy`` stays on disk, in the page cache. Anything else (float16, float64, other norms)
    becomes one new array, written block by block.

    With ``keep_float16``, float16 rows stay float16 (half the memory; the caller reads them
    through ``kernels.rows``): unit rows within ``UNIT_TOLERANCE_F16`` are returned as a view,
    other norms are normalised into a float16 copy.
    """
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        raise InvalidTypeError(f"{name} must be a numeric array; got dtype {arr.dtype}", param=name)
    if arr.ndim != 2:
        raise InvalidValueError(f"{name} must be a 2-D array (n, d); got shape {arr.shape}", param=name)
    dtype = np.float16 if keep_float16 and arr.dtype == np.float16 else np.float32
    tolerance = UNIT_TOLERANCE_F16 if dtype == np.float16 else UNIT_TOLERANCE
    as_is = arr.dtype == dtype and arr.flags.c_contiguous
    out = None if as_is else np.empty(arr.shape, dtype=dtype)
    for start in range(0, arr.shape[0], block):
        part = np.asarray(arr[start:start + block], dtype=np.float32)
        _finite(part, name, start)
        norms = np.sqrt(np.einsum("ij,ij->i", part, part, dtype=np.float64))[:, None]
        if (norms == 0).any():
            zero = np.flatnonzero(norms.reshape(-1) == 0) + start
            raise InvalidValueError(f"{name} has zero-norm vectors at rows {zero[:10].tolist()}; "
                                    "cosine is undefined there", param=name)
        if out is None and np.abs(norms - 1.0).max() > tolerance:
            out = np.empty(arr.shape, dtype=dtype)  # not unit after all: normalise a copy
            for done in range(0, start, block):
                earlier = np.asarray(arr[done:done + block], dtype=np.float32)
                out[done:done + block] = earlier / np.sqrt(np.einsum("ij,ij->i", earlier, earlier,
                                                                     dtype=np.float64))[:, None]
        if out is not None:
            np.divide(part, norms, out=out[start:start + block], casting="unsafe")
    if out is None:
        out = arr.view(np.ndarray)
        out.flags.writeable = False
    return out
