"""The one reader of users' files: regular files only, and never more bytes than a cap.

Every file the CLI reads on a user's behalf (pipelines and their bases, rlflow.yaml, verl configs
and what Hydra composes for them, data files, reward and tool files, checkpoints handed to
``export``) is opened here. A device (``/dev/zero``), a FIFO, a socket or a folder is refused
before it is opened, by ``stat``, so nothing blocks on a pipe nobody writes; the file is then
opened without blocking and checked again with ``fstat`` (it may have been swapped in between).
The cap is enforced on the bytes actually read, since a file's reported size can be 0 or wrong
(``/proc`` files). Refusals are ``UnsafeFile``, an ``OSError`` whose ``strerror`` says what the
file is, so callers word them like any other file that cannot be read. ``why_unwritable`` words
the other direction: an output path that cannot be written.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

_CHUNK = 1 << 20
_KINDS = (
    (stat.S_ISDIR, errno.EISDIR, "a folder"),
    (stat.S_ISFIFO, errno.EINVAL, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, errno.EINVAL, "a socket"),
    (stat.S_ISCHR, errno.EINVAL, "a character device"),
    (stat.S_ISBLK, errno.EINVAL, "a block device"),
)


class UnsafeFile(OSError):
    """A file that is not a regular file, or that holds more than its cap; ``strerror`` says which."""


def env_limit(name: str, default: int) -> int:
    """A byte cap from the environment variable ``name`` (a positive integer), else ``default``."""
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else default


def _refuse_special(mode: int, path: str) -> None:
    for test, code, kind in _KINDS:
        if test(mode):
            raise UnsafeFile(code, f"{kind}, not a regular file", path)
    if not stat.S_ISREG(mode):
        raise UnsafeFile(errno.EINVAL, "not a regular file", path)


def check_regular(path: str | os.PathLike) -> None:
    """``UnsafeFile`` unless ``path`` is a regular file (symlinks followed); ``OSError`` when it is missing."""
    _refuse_special(os.stat(path).st_mode, os.fspath(path))


@contextmanager
def open_regular(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """``path`` opened for binary reading, after checking it is a regular file (before and after opening)."""
    name = os.fspath(path)
    check_regular(name)
    # O_NONBLOCK: should the path have become a FIFO since the stat, the open returns at once.
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _refuse_special(os.fstat(fd).st_mode, name)
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def too_large(path: str | os.PathLike, limit: int, what: str = "file") -> UnsafeFile:
    """The refusal for ``path`` holding more than ``limit`` bytes."""
    return UnsafeFile(errno.EFBIG, f"the {what} holds more than {limit} bytes, the most rlflow reads", os.fspath(path))


def read_limited(handle: BinaryIO, limit: int, path: str | os.PathLike, what: str = "file") -> bytes:
    """At most ``limit`` bytes from ``handle``; ``UnsafeFile`` when there are more."""
    chunks, size = [], 0
    while True:
        chunk = handle.read(min(_CHUNK, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise too_large(path, limit, what)
        chunks.append(chunk)


def read_bytes(path: str | os.PathLike, limit: int, what: str = "file") -> bytes:
    """The bytes of regular file ``path``, refusing a special file or one over ``limit`` bytes."""
    with open_regular(path) as handle:
        return read_limited(handle, limit, path, what)


def read_text(path: str | os.PathLike, limit: int, what: str = "file") -> str:
    """``read_bytes`` decoded as UTF-8 (``UnicodeDecodeError`` for the caller to word)."""
    return read_bytes(path, limit, what).decode("utf-8")


def why_unwritable(path: str | os.PathLike, exc: OSError) -> str:
    """``exc``, raised writing under ``path``, as one line: the ancestor that is a file when one is in the way."""
    target = os.path.abspath(path)
    for parent in _ancestors(target):
        if os.path.lexists(parent) and not os.path.isdir(parent):
            return f"{path}: cannot write there, {parent} is a file, not a folder"
    where = exc.filename or path
    return f"{where}: cannot write: {exc.strerror or exc}"


def _ancestors(path: str) -> list[str]:
    out = []
    while (parent := os.path.dirname(path)) != path:
        out.append(parent)
        path = parent
    return out
