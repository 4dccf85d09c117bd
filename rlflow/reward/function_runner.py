"""Run reward functions in a child process, under a per-call deadline, and report each call's outcome.

``FunctionRunner`` owns one child (``rlflow.reward.function_child``) that loads the functions
once and serves every step after; a stage keeps the runner in its per-worker state. ``run``
sends a shard's calls in one message and reads the answers one by one, each within
``timeout_s`` of the previous one. A call past its deadline gets the child killed (SIGKILL, with
any process it started: the child leads its own process group) and restarted, and the remaining calls go to the new child; a child that dies mid-call (a crash,
``os._exit``, the kernel's OOM killer) is an error for that call and is restarted the same way.

Design decisions:
- The child is started with ``subprocess`` running ``python -c`` (as multiprocessing's
  ``spawn`` does) rather than through ``spawn`` itself: ``spawn`` re-imports the parent's main
  module in the child, which in a Ray worker is Ray's worker script with all of Ray behind it;
  starting bare keeps a (re)start at the cost of Python plus the reward module. The pipe is
  multiprocessing's ``Connection`` over a socket pair, and the child gets the parent's
  ``sys.path`` so module references resolve as they do in the parent.
- One message per batch out, one per result back: the per-call cost is a pickle round of a
  few hundred bytes, not a process or a thread per call.
- A function that times out ``GIVE_UP_AFTER`` (3) times in a row within one ``run`` is not
  called again in that run: its remaining calls are timeouts too. A function that hangs on
  every row then costs three timeouts, not one per row, before the stage reports it failed on
  every row; one slow row between answers never triggers it.
- Failing to start (a function that no longer loads, an import past ``max_memory_mb``, a child
  that does not answer within ``START_TIMEOUT_S``) raises ``RewardFunctionError``: nothing can
  be scored, so the step fails with the reason.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing import Pipe
from pathlib import Path

from rlflow.errors import StageError

START_TIMEOUT_S = 120.0  # loading the functions may import heavy packages
GIVE_UP_AFTER = 3  # timeouts in a row after which a function's other calls of the run are timeouts unrun
_BOOT = "import sys, importlib; sys.path.insert(0, sys.argv[1]); importlib.import_module(sys.argv[3]).main(int(sys.argv[2]))"
CHILD = "rlflow.reward.function_child"  # the module whose main(fd) serves the calls
_TIMEOUT = object()
_DIED = object()


class RewardFunctionError(StageError):
    """Reward functions that cannot run at all, or failed on every row of a step (named, with the first failure)."""


@dataclass(frozen=True)
class Outcome:
    """One function's result on one row. ``failure``: None, ``"error"`` or ``"timeout"``; ``kind`` and
    ``detail`` describe a failure (``kind`` is what is logged once: ``raised ValueError``, ``bad return``...)."""

    score: float = 0.0
    extras: dict[str, float] = field(default_factory=dict)
    failure: str | None = None
    kind: str = ""
    detail: str = ""
    text: str = ""  # a served tool's answer (a reward function answers with numbers only)


def outcome_of(message: tuple) -> Outcome:
    """The Outcome of one answer of the child."""
    if message[0] == "ok":
        return Outcome(message[1], message[2], text=message[3] if len(message) > 3 else "")
    if message[0] == "raised":
        return Outcome(failure="error", kind=f"raised {message[1]}", detail=f"{message[1]} at {message[2]}")
    return Outcome(failure="error", kind="bad return", detail=message[1])


class _Child:
    """One child process and the parent's end of its pipe; stopped when dropped."""

    def __init__(self, init: dict, child: str = CHILD) -> None:
        parent_end, child_end = Pipe(duplex=True)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(Path(__file__).resolve().parents[2]), str(child_end.fileno()), child],
            pass_fds=(child_end.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stopping it stops what it started too
        )
        child_end.close()
        self.conn = parent_end
        self._finalizer = weakref.finalize(self, _stop, self.proc, self.conn)
        try:
            self.conn.send(init)
        except OSError:  # it died at once: receive() reports it
            pass

    def receive(self, timeout_s: float):
        """The next message, ``_TIMEOUT`` when none came within ``timeout_s``, ``_DIED`` when the child is gone."""
        try:
            if not self.conn.poll(timeout_s):
                return _TIMEOUT
            return self.conn.recv()
        except (EOFError, OSError):
            return _DIED

    def exit_status(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "gone"
        return f"killed by signal {-code}" if code < 0 else f"exited with code {code}"

    def stop(self) -> None:
        self._finalizer()


def _stop(proc: subprocess.Popen, conn) -> None:
    conn.close()
    if proc.returncode is None:  # not reaped yet, so its pid is still its group's id
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


class FunctionRunner:
    """Calls ``references`` (``module:callable`` or ``file.py:callable``) in a child process."""

    def __init__(
        self, references: list[str], root: str | Path, timeout_s: float, max_memory_mb: int | None, child: str = CHILD
    ) -> None:
        """``child``: the module serving the calls (the tool process uses this runner with its own)."""
        self.references = list(references)
        self.child = child
        self.timeout_s = timeout_s
        self._init = {
            "sys_path": list(sys.path),
            "references": self.references,
            "root": str(root),
            "max_memory_mb": max_memory_mb,
        }
        self._child: _Child | None = None
        self.starts = 0
        self.start_seconds = 0.0  # how long the last start took, loading the functions included

    def run(self, calls: list[dict]) -> list[list[Outcome]]:
        """Every function on every call's keyword arguments: ``outcomes[row][function]``."""
        todo = [(row, index) for row in range(len(calls)) for index in range(len(self.references))]
        outcomes: list[list[Outcome | None]] = [[None] * len(self.references) for _ in calls]
        streak = [0] * len(self.references)  # timeouts in a row, per function
        while todo:
            runnable = []
            for row, index in todo:
                if streak[index] >= GIVE_UP_AFTER:
                    outcomes[row][index] = Outcome(
                        failure="timeout",
                        kind="timeout",
                        detail=f"not run: {GIVE_UP_AFTER} calls in a row went past timeout_s {self.timeout_s:g} s",
                    )
                else:
                    runnable.append((row, index))
            todo = runnable
            if not todo:
                break
            child = self._ready_child()
            try:
                child.conn.send([(index, calls[row]) for row, index in todo])
            except OSError:  # the child died while idle: start another and send again
                self._drop_child()
                child = self._ready_child()
                child.conn.send([(index, calls[row]) for row, index in todo])
            for position, (row, index) in enumerate(todo):
                message = child.receive(self.timeout_s)
                if message is _TIMEOUT or message is _DIED:
                    outcomes[row][index] = self._lost(message, child)
                    streak[index] += message is _TIMEOUT
                    todo = todo[position + 1 :]
                    break
                outcomes[row][index] = outcome_of(message)
                streak[index] = 0
            else:
                todo = []
        return outcomes  # type: ignore[return-value]

    def _lost(self, message, child: _Child) -> Outcome:
        self._drop_child()
        if message is _TIMEOUT:
            return Outcome(failure="timeout", kind="timeout", detail=f"no result within timeout_s {self.timeout_s:g} s")
        return Outcome(failure="error", kind="process died", detail=f"the reward process {child.exit_status()}")

    def _ready_child(self) -> _Child:
        if self._child is not None:
            return self._child
        child = _Child(self._init, self.child)
        message = child.receive(START_TIMEOUT_S)
        if message is _TIMEOUT or message is _DIED or message[0] != "ready":
            status = child.exit_status()
            child.stop()
            if message is _TIMEOUT:
                raise RewardFunctionError(
                    f"the reward functions' process did not load {', '.join(self.references)} within "
                    f"{START_TIMEOUT_S:g} s (a module that hangs on import?)"
                )
            if message is _DIED:
                raise RewardFunctionError(
                    f"the reward functions' process {status} while loading {', '.join(self.references)} "
                    "(if max_memory_mb is set, raise it: the imports may need more address space)"
                )
            raise RewardFunctionError(
                f"reward function {self.references[message[1]]!r} cannot be loaded: {message[2]}"
                + (" (raise max_memory_mb: its imports need more address space)" if "MemoryError" in message[2] else "")
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
