"""One run per run directory: an exclusive lock held for the run's life.

The lock is ``fcntl.flock`` on ``<run dir>/run.lock``, taken before the run writes anything and
without waiting: a second run (or a ``--resume``) of a directory in use fails at once, naming
the holder's pid and host, which the holder writes into the file once it has the lock. The
operating system drops the lock when the holder's process ends however it ends (``kill -9``
included), so a stale file never blocks a later run; the file itself is left in place (removing
it would let a late opener lock an unlinked file while a newcomer locks a fresh one). ``flock``
is per open file: it excludes processes on one machine and on file systems that implement it
across machines (local disks, most NFS v4 mounts); a run directory on a file system without
working locks is not protected.

``claim_run_dir`` also remembers which directories it had to create, so a run that fails before
it has written a step, a trace line or a checkpoint can remove them again (``discard``) rather
than leave an empty ``runs/<name>/<id>/checkpoints/`` behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from rlflow.errors import RunDirInUse

LOCK = "run.lock"


class RunLock:
    """The held lock on one run directory; ``release`` (or the process's end) gives it up."""

    def __init__(self, path: Path, created: list[Path]) -> None:
        self.path = path
        self.created = created  # directories this claim made, deepest first
        self._fh = None

    def acquire(self) -> None:
        fh = (self.path / LOCK).open("a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
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
        fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is None:
            return
        self._fh.truncate(0)  # while still held: a reader never sees a finished run named as the holder
        fcntl.flock(self._fh, fcntl.LOCK_UN)
        self._fh.close()
        self._fh = None

    def discard(self, known_files: tuple[str, ...]) -> None:
        """Remove the directories this claim created if the run left no file in them but ``known_files``
        (and the lock); anything else (a metrics line, a checkpoint) keeps them. Call it before ``release``."""
        if not self.created:
            return
        files = [p for p in self.path.rglob("*") if not p.is_dir()]
        if any(p.relative_to(self.path).as_posix() not in (*known_files, LOCK) for p in files):
            return
        for p in files:
            p.unlink()
        for folder in sorted((p for p in self.path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            folder.rmdir()
        for folder in self.created:  # the run dir itself, then the parents it needed
            try:
                folder.rmdir()
            except OSError:  # not empty: another run's directory lives there
                return


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


def _describe(text: str) -> str:
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on host {holder['host']}"
    except (ValueError, KeyError, TypeError):
        return "another process (it has not written its pid yet)"
