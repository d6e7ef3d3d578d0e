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

``FolderLock`` keeps a folder to one writing process at a time.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from chunktree.checks import InvalidValueError


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


class FolderLock:
    """One writer per folder, across processes: an exclusive ``flock`` on ``FOLDER/.chunktree.lock``
    that a second process sees at once, held until ``release`` or the end of the process, however
    it ends. The file names its holder (``who`` and the pid), for the message a second writer gets."""

    NAME = ".chunktree.lock"

    def __init__(self, folder: str | os.PathLike[str], who: str) -> None:
        import fcntl

        path = Path(folder) / self.NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise InvalidValueError(f"{folder}: cannot create its lock file {path} ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 300).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise InvalidValueError(f"{folder} is in use by {holder}: a folder has one writer at a time, so that no "
                                    "acknowledged write is lost. Give this one its own folder, or stop the other"
                                    ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{who} (pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n".encode())
        self.path = path
        self._fd: int | None = fd

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = None
