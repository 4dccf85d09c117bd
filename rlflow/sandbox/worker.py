"""The worker's side of the sandbox: ``serve(fd, load)`` caps the process, loads what it serves, answers calls.

A served module's ``main(fd)`` calls ``serve`` with its own ``load``: the reward functions'
(``rlflow.reward.function_calls``) and the tools' (``rlflow.tools.child``). Also the limits the
worker sets on itself: the address-space cap it cannot lift, the exit with its supervisor.
"""

from __future__ import annotations

import ctypes
import math
import numbers
import os
import resource
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from rlflow.sandbox.protocol import send, short

_CAP_SYS_RESOURCE = 24
_PR_CAPBSET_DROP = 24

# what ``load`` returns: from one message's calls ``(id, index, keyword arguments)``, each call's answer in
# order, without its id (``["ok", score, extras, dropped]``, ``["bad", text]``, ``["raised", type, text]``)
Answers = Callable[[list], Iterable[Sequence]]


class LoadFailure(Exception):
    """What ``load`` could not load: ``index``, the reference that failed (None: not one of them), and why."""

    def __init__(self, text: str, index: int | None = None) -> None:
        super().__init__(text)
        self.index = index


def serve(fd: int, load: Callable[[dict], Answers], watch_parent: bool = True) -> None:
    """Serve calls on ``fd`` until the pipe closes; a failure of the worker itself is reported as ``fatal``.

    ``load(init)`` runs once the address space is capped and ``sys.path`` is the parent's; it raises
    LoadFailure for what cannot load. ``watch_parent``: False when ``load`` calls ``exit_with_parent``
    itself (a contained worker does, after its guard, which binds the threads started after it)."""
    sys.stdout.reconfigure(line_buffering=True)
    conn = Connection(fd)
    if watch_parent:
        exit_with_parent()
    try:
        _serve(conn, load)
    except BaseException as exc:
        traceback.print_exc()
        line = traceback.format_exception_only(exc)[-1].strip()
        try:
            send(conn, ["fatal", short(line)])
        except BaseException:  # the pipe is gone too: the supervisor reports the exit code
            pass
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _serve(conn: Connection, load: Callable[[dict], Answers]) -> None:
    try:
        init = conn.recv()  # the end of a parent gone before it sent this
    except EOFError:
        return
    limit_memory(init["max_memory_mb"])
    sys.path[:] = init["sys_path"]
    try:
        answers = load(init)
    except LoadFailure as exc:
        send(conn, ["failed", exc.index, str(exc)])
        return
    send(conn, ["ready"])
    while True:
        try:
            calls = conn.recv()
        except EOFError:
            return
        for (call_id, _, _), (kind, *rest) in zip(calls, answers(calls), strict=True):
            send(conn, [kind, call_id, *rest])


def finite(value: Any, bound: float = math.inf) -> float | None:
    """``value`` as a float if it is a real number, finite and within ``bound``; else None."""
    if isinstance(value, numbers.Real):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            return None
        if math.isfinite(number) and abs(number) <= bound:
            return number
    return None


def exit_with_parent() -> None:
    """End this process when its parent (the supervisor) is gone, even while a call never returns."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def limit_memory(megabytes: int | None) -> None:
    """Cap the address space, hard limit included, so the served code cannot raise its own."""
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
