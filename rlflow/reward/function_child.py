"""The reward functions' own process: load them once, then call them on the rows the parent sends.

Started by ``rlflow.reward.function_runner`` as ``python -c ... main(fd)`` with one end of a
socket pair as ``fd``. The protocol, over ``multiprocessing.connection.Connection`` messages:

- parent -> child, first: ``{"sys_path", "references", "root", "max_memory_mb"}``; the child caps
  its address space, loads every function (``rlflow.reward.functions.load_function``) and
  answers ``("ready",)`` or ``("failed", index, text)``;
- parent -> child, then: lists of calls ``(function index, keyword arguments)``; the child answers
  each call with one message, in order: ``("ok", score, extras)``, ``("bad", text)`` for a
  return that is not a finite number or a dict with a finite numeric ``score``, or
  ``("raised", exception type, text)`` where the text names the traceback's last frame.

Design decisions:
- The child normalises what a function returns into floats before sending it, so the parent
  only ever unpickles tuples of strings and floats.
- Text written by a model reaches a function only as the ``solution_str`` argument. Messages
  quoting it (an exception's, a bad return's repr) are cut short, so a log line stays a line.
- The child ends when its pipe closes (the parent closed it or died) and, should a function
  never return, when a watchdog thread sees that its parent is gone.
"""

from __future__ import annotations

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


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "..."


def _finite(value: Any) -> float | None:
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return number
    return None


def normalise(value: Any) -> tuple:
    """A function's return value as an ``ok`` or ``bad`` message (see the module docstring)."""
    if not isinstance(value, dict):
        score = _finite(value)
        if score is None:
            return ("bad", f"returned {type(value).__name__} {_short(repr(value))}, not a finite number")
        return ("ok", score, {})
    score = _finite(value.get("score"))
    if score is None:
        return ("bad", f"returned a dict whose 'score' is {_short(repr(value.get('score')))}, not a finite number")
    extras = {}
    for key, item in value.items():
        if key == "score" or not isinstance(item, numbers.Real):
            continue  # other values (a parsed answer, a string) are not metrics
        if not isinstance(key, str):
            return ("bad", f"returned a dict with the key {_short(repr(key))}; keys must be strings")
        number = _finite(item)
        if number is None:
            return ("bad", f"returned a dict whose {key!r} is {item!r}, not a finite number")
        extras[key] = number
    return ("ok", score, extras)


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
    if megabytes is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = megabytes * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def main(fd: int) -> None:
    conn = Connection(fd)
    _exit_with_parent()
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
            conn.send(("failed", i, str(exc)))
            return
        except MemoryError:
            conn.send(("failed", i, "MemoryError while loading it"))
            return
    conn.send(("ready",))
    while True:
        try:
            calls = conn.recv()
        except EOFError:
            return
        for index, kwargs in calls:
            conn.send(call(functions[index], kwargs))
