"""Run reward functions in a child process, under a per-call deadline, and report each call's outcome.

Design notes: docs/design/function_runner.md.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing import Pipe
from pathlib import Path

from rlflow.errors import StageError
from rlflow.reward.function_child import MAX_EXTRAS, MAX_SCORE

START_TIMEOUT_S = 120.0  # loading the functions may import heavy packages
STOP_TIMEOUT_S = 5.0  # for the supervisor to kill what the functions started and report
GIVE_UP_AFTER = 3  # timeouts in a row after which a function's other calls of the run are timeouts unrun
MAX_MESSAGE_BYTES = 1 << 20  # one answer: a score, 64 extras and a few short texts
OUTPUT_CAP_BYTES = 1 << 20  # of the functions' stdout and stderr kept in the log file
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); from rlflow.reward.function_supervisor import main; "
    "main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6])"
)
CHILD = "rlflow.reward.function_child"  # the module whose main(fd) serves the calls
_TIMEOUT = object()
_DIED = object()
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_.:-]|\.\.+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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
    dropped: int = 0  # extra metrics past MAX_EXTRAS, left out
    text: str = ""  # a served tool's answer (a reward function answers with numbers only)

    @property
    def distrusted(self) -> bool:
        """The child broke the protocol or is dying: it is replaced before the next call."""
        return self.kind in ("bad message", "process died")


def metric_name(key: str) -> str:
    """``key`` as a metric name: no control characters, no path parts (``/``, ``..``), at most 64 characters."""
    return _NOT_A_NAME.sub("_", key).lstrip(".")[:64] or "_"


def _bad(detail: str, process: str = "the reward process") -> Outcome:
    return Outcome(failure="error", kind="bad message", detail=f"{process} sent {detail}")


def _text(value) -> bool:
    return isinstance(value, str) and len(value) <= 2000


def _line(text: str) -> str:
    """A text from the child as one log line: control characters (newlines, terminal escapes) become spaces."""
    return _CONTROL.sub(" ", text)


def answer_of(raw: bytes, due: int, process: str = "the reward process") -> Outcome:
    """The Outcome of one answer of the child to call ``due``, checked field by field (see the module docstring);
    ``process`` names the child in the failures' details."""
    try:
        message = json.loads(raw, parse_constant=lambda c: None)  # NaN and Infinity are not scores
    except (ValueError, RecursionError):
        return _bad("a message that is not JSON (a function writing to its pipe?)", process)
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        return _bad("a message that is not a list starting with its kind", process)
    kind, fields = message[0], message[1:]
    if kind == "fatal" and len(fields) == 1 and _text(fields[0]):
        return Outcome(failure="error", kind="process died", detail=f"{process} failed: {_line(fields[0])}")
    if not fields or fields[0] != due or isinstance(fields[0], bool):
        return _bad(f"an answer to call {str(fields[0] if fields else None)[:40]!r} while call {due} was due", process)
    fields = fields[1:]
    if kind == "ok" and len(fields) in (3, 4):
        score, extras, dropped, *text = fields  # a tool's answer carries its text last
        if (
            _number(score)
            and abs(score) <= MAX_SCORE
            and _numbers(extras)
            and isinstance(dropped, int)
            and dropped >= 0
        ):
            if all(isinstance(t, str) for t in text):
                return _clean(float(score), extras, dropped, "".join(text))
    elif kind == "bad" and len(fields) == 1 and _text(fields[0]):
        return Outcome(failure="error", kind="bad return", detail=_line(fields[0]))
    elif kind == "raised" and len(fields) == 2 and all(_text(f) for f in fields):
        name = _line(fields[0][:100])
        return Outcome(failure="error", kind=f"raised {name}", detail=f"{name} at {_line(fields[1])}")
    return _bad(f"a malformed {kind[:20]!r} message", process)


def _numbers(extras) -> bool:
    return isinstance(extras, dict) and all(isinstance(k, str) and _number(v) for k, v in extras.items())


def _number(value) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _clean(score: float, extras: dict, dropped: int, text: str) -> Outcome:
    kept: dict[str, float] = {}
    for key, value in extras.items():
        name = metric_name(key)
        if name in kept:
            continue
        if len(kept) < MAX_EXTRAS:
            kept[name] = float(value)
        else:
            dropped += 1
    return Outcome(score, kept, dropped=dropped, text=text)


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
                return _bad(f"a message over {MAX_MESSAGE_BYTES} bytes", self.process)
            return _DIED

    def exit_status(self) -> str:
        """How the functions' process ended, as its supervisor saw it (waiting for the report a little)."""
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


class FunctionRunner:
    """Calls ``references`` (``module:callable`` or ``file.py:callable``) in a child process."""

    def __init__(
        self,
        references: list[str],
        root: str | Path,
        timeout_s: float,
        max_memory_mb: int | None,
        log_path: str | Path | None = None,
        child: str = CHILD,
        serving: str | None = None,
        keys: tuple[str, str] = ("timeout_s", "max_memory_mb"),
    ) -> None:
        """``log_path``: where the functions' stdout and stderr go (capped); None: this process's stderr.
        ``child``: the module serving the calls (the tool process uses this runner with its own);
        ``serving``: what the child serves, as messages name it (``the tools of tools.yaml``), which then
        call the child "the tool process"; None: the reward functions, named by their references;
        ``keys``: the config keys of the deadline and the memory cap, as the messages' fixes name them."""
        self.references = list(references)
        self.child = child
        self.serving = serving
        self.process = "the tool process" if serving else "the reward process"
        self.timeout_s = timeout_s
        self.timeout_key, self.memory_key = keys
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
        loading = self.serving or ", ".join(self.references)
        process = self.process if self.serving else "the reward functions' process"
        if message is _TIMEOUT:
            child.stop()
            raise RewardFunctionError(
                f"{process} did not load {loading} within {START_TIMEOUT_S:g} s (a module that hangs on import?)"
            )
        answer = _start_answer(message, len(self.references)) if isinstance(message, bytes) else None
        if answer is None or answer[0] != "ready":
            status = child.exit_status()
            child.stop()
            if answer is None:
                raise RewardFunctionError(
                    f"{process} {status} while loading {loading} "
                    f"(if {self.memory_key} is set, raise it: the imports may need more address space)"
                )
            which = self.serving or (
                f"reward function {self.references[answer[1]]!r}" if answer[1] is not None else "its process"
            )
            raise RewardFunctionError(
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


def _start_answer(raw: bytes, functions: int) -> list:
    """The child's first answer: ``["ready"]``, or ``["failed", index or None, text]`` for anything else."""
    try:
        message = json.loads(raw)
    except ValueError:
        message = None
    if message == ["ready"]:
        return message
    if isinstance(message, list) and len(message) == 3 and message[0] == "failed" and _text(message[2]):
        index = message[1] if isinstance(message[1], int) and 0 <= message[1] < functions else None
        return ["failed", index, message[2]]
    if isinstance(message, list) and len(message) == 2 and message[0] == "fatal" and _text(message[1]):
        return ["failed", None, message[1]]
    return ["failed", None, "its process answered the start with a malformed message"]
