"""The one reader of users' files: regular files only, and never more bytes than a cap.

Refusals are ``UnsafeFile`` (an ``OSError``); ``read_lines`` reads line by line, and ``write_output`` writes
whole or not at all. Design notes: docs/design/io.md.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, BinaryIO

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


def read_lines(path: str | os.PathLike, max_line: int) -> Iterator[tuple[int, bytes, bool]]:
    """Each line of regular file ``path`` as (number, its bytes without the newline, whether it ended in one),
    one at a time; ``UnsafeFile`` naming the line when one holds more than ``max_line`` bytes."""
    with open_regular(path) as handle:
        number = 0
        while line := handle.readline(max_line + 1):
            number += 1
            complete = line.endswith(b"\n")
            body = line[:-1] if complete else line
            if len(body) > max_line:
                raise UnsafeFile(
                    errno.EFBIG, f"line {number} holds more than {max_line} bytes, the most rlflow reads in one", path
                )
            yield number, body, complete


def read_json_lines(path: str | os.PathLike, max_line: int, error: type[Exception]) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of each non-blank line of a JSON Lines file a run appends to (metrics, trace),
    one at a time; an unfinished last line that is not JSON yet is skipped (the run is still writing it). A line
    that is not UTF-8, not JSON or nested too deeply, and a file that cannot be read: ``error`` naming it."""
    try:
        for number, line, complete in read_lines(path, max_line):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                where = f"byte {line[exc.start]:#04x} at column {exc.start + 1}"
                raise error(f"{path}:{number}: not UTF-8 text ({where})") from None
            except json.JSONDecodeError as exc:
                if complete:
                    raise error(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise error(f"{path}:{number}: not valid JSON (nested too deeply to read)") from None
    except OSError as exc:
        raise error(f"{path}: cannot read it: {exc.strerror or exc}") from None


def write_output(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a regular file (or a new one) through a temporary file
    beside it, renamed over it once every byte is written, so a full disk leaves the previous file as it was and
    no half-written one; a device or pipe that exists (``/dev/null``) is written directly, and every error it
    reports (``/dev/full``: no space) is raised. ``OSError`` for the caller to word (``why_unwritable``)."""
    target = os.fspath(path)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "it is a folder, not a file", target)
    if mode is not None and not stat.S_ISREG(mode):
        # O_NONBLOCK: a FIFO nobody reads fails at once (ENXIO) instead of waiting for a reader
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            os.set_blocking(fd, True)
            _write_all(fd, data, target)
        finally:
            os.close(fd)
        return
    folder, name = os.path.split(os.path.abspath(target))
    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        try:
            # mkstemp's 0600 would make the output private; it gets what a plain open would give it
            os.fchmod(fd, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
            _write_all(fd, data, target)
            os.fsync(fd)  # a full disk may only say so here, and never after the rename
        finally:
            os.close(fd)
        os.replace(temporary, target)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _write_all(fd: int, data: bytes, path: str) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, path) from None
        view = view[written:]


def _umask() -> int:
    current = os.umask(0)  # the only way to read it is to set it: put back at once
    os.umask(current)
    return current


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
