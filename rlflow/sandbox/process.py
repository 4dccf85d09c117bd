"""``Sandbox``: the parent's handle on one supervised child process that serves calls under a deadline.

It starts the child (``rlflow.sandbox.supervisor`` forking a worker that runs ``child``'s ``main``),
sends each batch of calls in one message, checks every answer (``rlflow.sandbox.protocol``), and
replaces a child that times out, dies or breaks the protocol. Design notes: docs/design/sandbox.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass
from multiprocessing import Pipe
from pathlib import Path

from rlflow.errors import StageError
from rlflow.sandbox.protocol import Outcome, answer_of, bad_message, start_answer

START_TIMEOUT_S = 120.0  # loading what the child serves may import heavy packages
STOP_TIMEOUT_S = 5.0  # for the supervisor to kill what the child started and report
GIVE_UP_AFTER = 3  # timeouts in a row after which a reference's other calls of the run are timeouts unrun
MAX_MESSAGE_BYTES = 1 << 20  # one answer: a score, 64 extras and a few short texts
OUTPUT_CAP_BYTES = 1 << 20  # of the child's stdout and stderr kept in the log file
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); from rlflow.sandbox.supervisor import main; "
    "main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6])"
)
_TIMEOUT = object()
_DIED = object()


class SandboxError(StageError):
    """The child cannot start at all (named, with the reason)."""


@dataclass(frozen=True)
class Names:
    """How a sandbox's failures name things, so that each reads as its user's: ``process``, the child in a
    call's failure (``the tool process``); ``loader``, the child in a failure to start; ``loading``, what it
    loads; ``references``, what a failure to load each reference names, and ``unknown``, one that names none;
    ``keys``, the config keys of the deadline and the memory cap, as the fixes name them."""

    process: str
    loader: str
    loading: str
    references: tuple[str, ...]
    unknown: str
    keys: tuple[str, str] = ("timeout_s", "max_memory_mb")


class _Child:
    """One supervised child process and the parent's end of its pipe; stopped when dropped."""

    def __init__(self, init: dict, log_path: str, child: str, process: str) -> None:
        self.process = process  # how messages name it: the reward process, the tool process
        parent_end, child_end = Pipe(duplex=True)
        status_r, status_w = os.pipe()
        self.started = time.monotonic()
        args = [str(Path(__file__).resolve().parents[2]), str(child_end.fileno()), str(status_w)]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, *args, log_path, str(OUTPUT_CAP_BYTES), child],
            pass_fds=(child_end.fileno(), status_w),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the last resort of stop() reaches all of it
        )
        child_end.close()
        os.close(status_w)
        self.conn = parent_end
        self.status_fd = status_r
        self._finalizer = weakref.finalize(self, _stop, self.proc, self.conn, status_r)
        try:
            self.conn.send(init)
        except OSError:  # it died at once: receive() reports it
            pass

    def receive(self, timeout_s: float):
        """The next message's bytes, ``_TIMEOUT`` when none came within ``timeout_s``, ``_DIED`` when the
        child is gone, or an Outcome for a message over ``MAX_MESSAGE_BYTES``."""
        try:
            if not self.conn.poll(timeout_s):
                return _TIMEOUT
            return self.conn.recv_bytes(MAX_MESSAGE_BYTES)
        except EOFError:
            return _DIED
        except OSError as exc:
            if "bad message length" in str(exc):
                return bad_message(f"a message over {MAX_MESSAGE_BYTES} bytes", self.process)
            return _DIED

    def exit_status(self) -> str:
        """How the worker ended, as its supervisor saw it (waiting for the report a little)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(STOP_TIMEOUT_S)
        with contextlib.suppress(OSError):
            os.set_blocking(self.status_fd, False)
            said = os.read(self.status_fd, 200).decode(errors="replace").strip()
            if said:
                return said
        code = self.proc.poll()
        if code is None:
            return "gone"
        return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"

    def stop(self) -> None:
        self._finalizer()


def _stop(proc: subprocess.Popen, conn, status_fd: int) -> None:
    """Ask the supervisor to end everything (SIGTERM); if it does not within STOP_TIMEOUT_S, kill its group."""
    conn.close()
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(OSError):
        os.close(status_fd)


class Sandbox:
    """Calls each of ``references`` on each call's keyword arguments in a child process serving ``child``."""

    def __init__(
        self,
        child: str,
        references: list[str],
        root: str | Path,
        timeout_s: float,
        max_memory_mb: int | None,
        log_path: str | Path | None,
        names: Names,
        error: type[SandboxError] = SandboxError,
    ) -> None:
        """``child``: the module whose ``main(fd)`` serves the calls (through ``rlflow.sandbox.worker.serve``);
        ``references``: what it loads, sent to it with ``root`` and ``max_memory_mb``; ``log_path``: where its
        stdout and stderr go (capped); None: this process's stderr; ``error``: raised when it cannot start."""
        self.references = list(references)
        self.child = child
        self.names = names
        self.process = names.process
        self.error = error
        self.timeout_s = timeout_s
        self.timeout_key, self.memory_key = names.keys
        self.log_path = str(log_path or "")
        if log_path is not None:
            Path(log_path).parent.mkdir(exist_ok=True)  # not its parents: a run directory swept away stays away
        self._calls = 0  # call ids: each answer must name the call it answers
        self._init = {
            "sys_path": list(sys.path),
            "references": self.references,
            "root": str(root),
            "max_memory_mb": max_memory_mb,
        }
        self._child: _Child | None = None
        self.starts = 0
        self.start_seconds = 0.0  # how long the last start took, loading the references included

    def run(self, calls: list[dict]) -> list[list[Outcome]]:
        """Every reference on every call's keyword arguments: ``outcomes[row][reference]``."""
        todo = [(row, index) for row in range(len(calls)) for index in range(len(self.references))]
        outcomes: list[list[Outcome | None]] = [[None] * len(self.references) for _ in calls]
        streak = [0] * len(self.references)  # timeouts in a row, per reference
        while todo:
            runnable = []
            for row, index in todo:
                if streak[index] >= GIVE_UP_AFTER:
                    outcomes[row][index] = Outcome(
                        failure="timeout",
                        kind="timeout",
                        detail=f"not run: {GIVE_UP_AFTER} calls in a row went past {self.timeout_key} "
                        f"{self.timeout_s:g} s",
                    )
                else:
                    runnable.append((row, index))
            todo = runnable
            if not todo:
                break
            child = self._ready_child()
            first = self._calls
            self._calls += len(todo)
            batch = [(first + i, index, calls[row]) for i, (row, index) in enumerate(todo)]
            try:
                child.conn.send(batch)
            except OSError:  # the child died while idle: start another and send again
                self._drop_child()
                child = self._ready_child()
                child.conn.send(batch)
            for position, (row, index) in enumerate(todo):
                message = child.receive(self.timeout_s)
                if message is _TIMEOUT or message is _DIED:
                    outcomes[row][index] = self._lost(message, child)
                    streak[index] += message is _TIMEOUT
                    todo = todo[position + 1 :]
                    break
                outcome = (
                    message if isinstance(message, Outcome) else answer_of(message, first + position, self.process)
                )
                outcomes[row][index] = outcome
                streak[index] = 0
                if outcome.distrusted:
                    if outcome.kind == "process died":  # its own last words: add how it ended
                        outcome = outcomes[row][index] = Outcome(
                            failure="error", kind=outcome.kind, detail=f"{outcome.detail} ({child.exit_status()})"
                        )
                    self._drop_child()
                    todo = todo[position + 1 :]
                    break
            else:
                todo = []
        return outcomes  # type: ignore[return-value]

    def _lost(self, message, child: _Child) -> Outcome:
        if message is _TIMEOUT:
            self._drop_child()
            detail = f"no result within {self.timeout_key} {self.timeout_s:g} s"
            return Outcome(failure="timeout", kind="timeout", detail=detail)
        said = child.exit_status()  # before the clean-up, which would report its own SIGKILL
        self._drop_child()
        return Outcome(failure="error", kind="process died", detail=f"{self.process} {said}")

    def _ready_child(self) -> _Child:
        if self._child is not None:
            return self._child
        child = _Child(self._init, self.log_path, self.child, self.process)
        message = child.receive(START_TIMEOUT_S)
        loader, loading = self.names.loader, self.names.loading
        if message is _TIMEOUT:
            child.stop()
            raise self.error(
                f"{loader} did not load {loading} within {START_TIMEOUT_S:g} s (a module that hangs on import?)"
            )
        answer = start_answer(message, len(self.references)) if isinstance(message, bytes) else None
        if answer is None or answer[0] != "ready":
            status = child.exit_status()
            child.stop()
            if answer is None:
                raise self.error(
                    f"{loader} {status} while loading {loading} "
                    f"(if {self.memory_key} is set, raise it: the imports may need more address space)"
                )
            which = self.names.unknown if answer[1] is None else self.names.references[answer[1]]
            raise self.error(
                f"{which} cannot be loaded: {answer[2]}"
                + (
                    f" (raise {self.memory_key}: its imports need more address space)"
                    if "MemoryError" in answer[2]
                    else ""
                )
            )
        self.starts += 1
        self.start_seconds = time.monotonic() - child.started
        self._child = child
        return child

    def _drop_child(self) -> None:
        if self._child is not None:
            self._child.stop()
            self._child = None

    def close(self) -> None:
        """Stop the child (it also stops by itself when this process ends)."""
        self._drop_child()
