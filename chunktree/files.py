"""How chunktree writes files: whole or not at all, never through a link, with the space reserved.

Every file chunktree writes (outputs, pictures, saved forests, deciders, reports) is made by
``replacing``: a new file with a random hidden name is created exclusively (``O_EXCL``, so no file
or link planted under a known temporary name is ever opened) in the target's folder, written,
flushed to disk, and renamed onto the target. The rename replaces whatever the path held, a link
included, and never writes through the link to its target. If the writing fails or is
interrupted, the temporary file is removed and the target is as it was.

``replacing_npy`` does the same for a memory-mapped ``.npy`` array whose rows come in as they are
computed, and reserves the file's whole size on disk first, so that a full disk is an ``OSError``
before any work instead of a ``SIGBUS`` in the middle of it.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], mode: str = "w", encoding: str = "utf-8") -> Iterator[IO[Any]]:
    """A file object (``mode`` ``"w"``: text, ``"wb"``: bytes) whose content becomes ``path`` when
    the block ends without an error (see the module's docstring)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.partial")
    # O_EXCL: created here or not at all, never an existing file or link; 0o666 less the umask, as open() makes
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        binary = "b" in mode
        with os.fdopen(fd, "w+b" if binary else "w", encoding=None if binary else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def replacing_npy(path: str | os.PathLike[str], shape: tuple[int, ...], dtype: Any) -> Iterator[np.ndarray]:
    """A writable memory map of a new ``.npy`` array of ``shape`` and ``dtype`` that becomes
    ``path`` when the block ends without an error; its space on disk is reserved first (an
    ``OSError`` naming the size when the disk cannot hold it)."""
    dtype = np.dtype(dtype)
    with replacing(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
        f.flush()
        offset = f.tell()
        size = offset + math.prod(shape) * dtype.itemsize
        _reserve(f.fileno(), size, Path(path))
        if math.prod(shape) == 0:
            yield np.zeros(shape, dtype)
            return
        array = np.memmap(f, dtype=dtype, mode="r+", offset=offset, shape=shape)
        try:
            yield array
            array.flush()
        finally:
            del array  # the mapping is closed before the rename


def _reserve(fd: int, size: int, path: Path) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise OSError(exc.errno, f"not enough space for {path} ({size / 2**20:,.1f} MiB): "
                                     f"{os.strerror(exc.errno)}") from None
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a filesystem without fallocate
            raise
        os.ftruncate(fd, size)
