"""A small parent that outlives the driver: whatever kills the run, its directory is left whole or not at all.

``rlflow run`` forks once its run directory is locked (``run_pipeline(supervise=True)``); the child
is the driver and carries on, the parent only waits. A Python ``finally`` never runs when the
driver dies natively (``os.abort()`` in an extension, the kernel's OOM killer, ``kill -9``), so the
parent does that clean-up: it still holds the run directory's lock (the lock belongs to the open
file both share), calls ``on_death`` with the signal, and exits with the shell's status for it
(128 + the signal). A driver that ends by itself cleaned up on its way out; the parent exits with
its status and does nothing else.

- The driver has its own process group: the parent forwards SIGINT, SIGTERM and SIGHUP to it
  exactly once (a terminal's Ctrl-C reaches only the parent's group), so its clean-up is never
  cut short by a second copy of the same Ctrl-C.
- The driver gets SIGKILL when the parent dies (``PR_SET_PDEATHSIG``): killing the process a user
  or scheduler started ends the run as it did before there was a parent.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def fork_driver(on_death: Callable[[signal.Signals], None]) -> None:
    """Fork; return in the child (the driver). The parent never returns: it waits and exits as the driver did."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        _die_with(parent)
        return
    _supervise(pid, on_death)


def _die_with(parent: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def _supervise(pid: int, on_death: Callable[[signal.Signals], None]) -> NoReturn:
    for signum in _FORWARDED:
        signal.signal(signum, lambda s, _frame: _forward(pid, s))
    while True:
        try:
            _, status = os.waitpid(pid, 0)  # retried by Python after each forwarded signal
            break
        except ChildProcessError:  # pragma: no cover - reaped elsewhere; nothing left to wait for
            status = 0
            break
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signum = signal.Signals(-code)
        try:
            on_death(signum)
        except BaseException as exc:  # report and still exit with the driver's status
            print(f"rlflow run: cleaning up after the driver failed: {exc}", file=sys.stderr)
        code = 128 + signum
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
