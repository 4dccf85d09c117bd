"""The worker that loads the reward functions once, then calls them on the rows the parent sends.

Forked by ``rlflow.reward.function_supervisor`` (which owns its output and its descendants) with
one end of a socket pair as ``fd``. The protocol, over ``multiprocessing.connection.Connection``:

- runner -> worker, first (pickled): ``{"sys_path", "references", "root", "max_memory_mb"}``;
  the worker caps its address space, loads every function (``rlflow.reward.functions``) and
  answers ``["ready"]`` or ``["failed", index, text]``;
- runner -> worker, then (pickled): lists of calls ``(call id, function index, keyword
  arguments)``; the worker answers each call, in order, with one message: ``["ok", id, score,
  extras, dropped]`` (a bare number returned is also its ``acc`` extra, as verl's reward managers
  log it), ``["bad", id, text]`` for a return that is not a finite number or a dict
  with a finite numeric ``score``, or ``["raised", id, exception type, text]`` where the text
  names the traceback's last frame; ``["fatal", text]`` if the worker itself fails. (The tool
  process, ``rlflow.tools.child``, speaks the same protocol; its ``ok`` carries the tool's text last.)

Design decisions:
- Answers are JSON of strings, finite floats and ints, never pickles: the runner parses them
  without running anything and checks every field and the call id (``function_runner``), since
  the functions share this process and could write to the pipe themselves.
- The address-space cap lowers the hard limit too, and a worker running as root drops
  ``CAP_SYS_RESOURCE``, so a function cannot lift its own limit.
- At most ``MAX_EXTRAS`` extra numbers per answer (the others are counted in ``dropped``).
- Text written by a model reaches a function only as the ``solution_str`` argument. Messages
  quoting it (an exception's, a bad return's repr) are cut short, so a log line stays a line.
- The worker ends when its pipe closes and, should a function never return, when a watchdog
  thread sees that the supervisor is gone.
"""

from __future__ import annotations

import ctypes
import json
import math
import numbers
import os
import resource
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from rlflow.reward.functions import FunctionLoadError, load_function, parse_reference

_MAX_TEXT = 300  # characters of an exception message or a repr kept in a report
MAX_EXTRAS = 64  # extra numbers one answer may carry
_CAP_SYS_RESOURCE = 24
_PR_CAPBSET_DROP = 24


# scores are float32 tensors whose squares make the group's std: 1e308 passed as finite and became inf
MAX_SCORE = 1e18
NOT_A_SCORE = f"not a finite number within +-{MAX_SCORE:g}"


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "..."


def _finite(value: Any, bound: float = math.inf) -> float | None:
    if isinstance(value, numbers.Real):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            return None
        if math.isfinite(number) and abs(number) <= bound:
            return number
    return None


def normalise(value: Any) -> tuple:
    """A function's return value as an ``ok`` or ``bad`` message (see the module docstring)."""
    if not isinstance(value, dict):
        score = _finite(value, MAX_SCORE)
        if score is None:
            return ("bad", f"returned {type(value).__name__} {_short(repr(value))}, {NOT_A_SCORE}")
        # verl's reward managers log a bare score as `acc` too: validation's core figure and DAPO's
        # filter_groups.metric: acc read it
        return ("ok", score, {"acc": score}, 0)
    score = _finite(value.get("score"), MAX_SCORE)
    if score is None:
        return ("bad", f"returned a dict whose 'score' is {_short(repr(value.get('score')))}, {NOT_A_SCORE}")
    extras: dict[str, float] = {}
    dropped = 0
    for key, item in value.items():
        if key == "score" or not isinstance(item, numbers.Real):
            continue  # other values (a parsed answer, a string) are not metrics
        if not isinstance(key, str):
            return ("bad", f"returned a dict with the key {_short(repr(key))}; keys must be strings")
        number = _finite(item)
        if number is None:
            return ("bad", f"returned a dict whose {_short(repr(key))} is {item!r}, not a finite number")
        if len(extras) < MAX_EXTRAS:
            extras[key] = number
        else:
            dropped += 1
    return ("ok", score, extras, dropped)


def last_frame(exc: BaseException) -> str:
    """``file:line in function: message`` for the innermost frame of ``exc``'s traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "(no traceback)"
    return f"{where}: {_short(exc)}"


def call(fn, kwargs: dict) -> tuple:
    """Call ``fn`` by keyword; its outcome as one message."""
    try:
        value = fn(**kwargs)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: a function must not end the process that serves the others
        return ("raised", type(exc).__name__, last_frame(exc))
    return normalise(value)


def _exit_with_parent() -> None:
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _limit_memory(megabytes: int | None) -> None:
    """Cap the address space, hard limit included, so a function cannot raise its own."""
    if megabytes is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = megabytes * 2**20 if hard == resource.RLIM_INFINITY else min(megabytes * 2**20, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if os.geteuid() == 0:
        _drop_resource_capability()


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_resource_capability() -> None:
    """Root may raise a hard limit (CAP_SYS_RESOURCE): drop it from this process and whatever it execs."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_CAPBSET_DROP, _CAP_SYS_RESOURCE, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return
    bit = ~(1 << _CAP_SYS_RESOURCE) & 0xFFFFFFFF
    data[0].effective &= bit
    data[0].permitted &= bit
    data[0].inheritable &= bit
    libc.capset(ctypes.byref(header), data)


def _send(conn: Connection, message: list) -> None:
    conn.send_bytes(json.dumps(message, allow_nan=False).encode())


def main(fd: int) -> None:
    """Serve calls until the pipe closes; a failure of the worker itself is reported as ``fatal``."""
    sys.stdout.reconfigure(line_buffering=True)
    conn = Connection(fd)
    _exit_with_parent()
    try:
        _serve(conn)
    except BaseException as exc:
        traceback.print_exc()
        line = traceback.format_exception_only(exc)[-1].strip()
        try:
            _send(conn, ["fatal", _short(line)])
        except BaseException:  # the pipe is gone too: the supervisor reports the exit code
            pass
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _serve(conn: Connection) -> None:
    try:
        init = conn.recv()
    except EOFError:
        return
    _limit_memory(init["max_memory_mb"])
    sys.path[:] = init["sys_path"]
    functions = []
    for i, text in enumerate(init["references"]):
        try:
            functions.append(load_function(parse_reference(text), init["root"]))
        except FunctionLoadError as exc:
            _send(conn, ["failed", i, str(exc)])
            return
        except MemoryError:
            _send(conn, ["failed", i, "MemoryError while loading it"])
            return
    _send(conn, ["ready"])
    while True:
        try:
            calls = conn.recv()
        except EOFError:
            return
        for call_id, index, kwargs in calls:
            kind, *rest = call(functions[index], kwargs)
            _send(conn, [kind, call_id, *rest])
