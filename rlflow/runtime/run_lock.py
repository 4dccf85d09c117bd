"""One run per run directory: an exclusive lock held for the run's life.

``fcntl.flock`` on ``<run dir>/run.lock``; ``claim_run_dir`` and ``sweep_abandoned`` clean up after failed runs.
Design notes: docs/design/run_dir.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rlflow.errors import RunDirInUse

LOCK = "run.lock"

log = logging.getLogger("rlflow.runtime")


class RunLock:
    """The held lock on one run directory; ``release`` (or the process's end) gives it up."""

    def __init__(self, path: Path, created: list[Path]) -> None:
        self.path = path
        self.created = created  # directories this claim made, deepest first
        self._fh = None

    def acquire(self) -> None:
        fh = (self.path / LOCK).open("a+")
        try:
            _flock_soon(fh)
        except BlockingIOError:
            fh.seek(0)
            holder = _describe(fh.read())
            fh.close()
            raise RunDirInUse(
                f"run directory {self.path} is in use by {holder}; wait for that run to end, stop it, "
                "or choose another --run-dir"
            ) from None
        fh.seek(0)
        fh.truncate()
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        fh.write(json.dumps({**holder, "created": [str(p.absolute()) for p in self.created]}))
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is None:
            return
        self._fh.truncate(0)  # while still held: a reader never sees a finished run named as the holder
        fcntl.flock(self._fh, fcntl.LOCK_UN)
        self._fh.close()
        self._fh = None

    def discard(self) -> None:
        """Remove the run directory and the parents it needed if this claim created them (a directory the
        user made is left, with what the run wrote in it). Call it before ``release``."""
        _remove_created(self.created)
        self.created = []


def claim_run_dir(path: Path) -> RunLock:
    """Create ``path`` if needed and lock it for this process; raises ``RunDirInUse`` if another run holds it."""
    path = Path(path)
    created = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    lock = RunLock(path, created)
    try:
        lock.acquire()
    except RunDirInUse:
        lock.created = []  # the holder's directory: never ours to remove
        raise
    return lock


def _flock_soon(fh) -> None:
    """Take the lock, allowing a few milliseconds for another command that only looks (``sweep_abandoned``,
    ``holders``) to let go of it; a live run holds it for good, so a second run still fails at once."""
    for attempt in range(5):
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == 4:
                raise
            time.sleep(0.01)


def _remove_created(created: list[Path]) -> None:
    for attempt in range(3):  # a process of the dead run may still be creating a file in it
        try:
            if created and created[0].exists():
                shutil.rmtree(created[0])
            break
        except OSError:
            if attempt == 2:
                raise
            time.sleep(0.2)
    for folder in created[1:]:  # the parents it needed, while empty
        try:
            folder.rmdir()
        except OSError:  # not empty: another run's directory lives there
            return


def holders(root: Path) -> Iterator[tuple[Path, str]]:
    """The run directories under ``root`` whose lock is held now, with their holder ("pid N on host H")."""
    for path in sorted(root.iterdir()) if root.is_dir() else ():
        if (path / LOCK).is_file():
            with _tried(path) as text:
                if text is None:
                    yield path, _describe((path / LOCK).read_text())


def sweep_abandoned(root: Path, resumable: Callable[[Path], bool]) -> list[Path]:
    """Remove run directories under ``root`` whose run died without releasing its lock (the lock is free
    but the file still names a holder on this host) before it made them ``resumable``; returns them."""
    swept = []
    for path in sorted(root.iterdir()) if root.is_dir() else ():
        lock_file = path / LOCK
        if not lock_file.is_file() or _abandoned(lock_file.read_text(), path) is None:
            continue  # the usual case, read without taking the lock: released cleanly, or being claimed
        with _tried(path) as text:
            holder = _abandoned(text or "", path)  # read again under the lock: a run may have ended meanwhile
            if holder is None or resumable(path):
                continue
            _remove_created([Path(p) for p in holder["created"]])
            swept.append(path)
            log.warning(
                "removed %s: its run (pid %s) died before its first checkpoint and left it behind", path, holder["pid"]
            )
    return swept


def _abandoned(text: str, path: Path) -> dict | None:
    """The holder a lock file names if it is this host's and its directory is ``path``, which it created."""
    try:
        holder = json.loads(text)
        created = holder["created"]
    except (ValueError, KeyError, TypeError):
        return None
    if holder.get("host") != socket.gethostname() or not created or Path(created[0]) != path.absolute():
        return None
    return holder


@contextlib.contextmanager
def _tried(path: Path) -> Iterator[str | None]:
    """The lock file's text with the lock taken for the block, or None when another process holds it."""
    with (path / LOCK).open("r") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        try:
            yield fh.read()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _describe(text: str) -> str:
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on host {holder['host']}"
    except (ValueError, KeyError, TypeError):
        return "another process (it has not written its pid yet)"
