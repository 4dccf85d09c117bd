"""A small parent that outlives the driver: whatever kills the run, its directory is left whole or not at all.

Design notes: docs/design/supervise.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def fork_driver(on_death: Callable[[signal.Signals], None]) -> None:  # the parent ends in os._exit
    """Fork; return in the child (the driver). The parent never returns: it waits and exits as the driver did."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    driver: list[int] = []
    pending: list[int] = []  # signals that came before the fork: passed on once there is a driver

    def forward(signum: int, _frame) -> None:
        if driver:
            _forward(driver[0], signum)
        else:
            pending.append(signum)

    previous = {signum: signal.signal(signum, forward) for signum in _FORWARDED}
    before_fork = len(pending)
    pid = os.fork()
    if pid == 0:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        os.setpgid(0, 0)
        _die_with(parent)
        for signum in pending:
            signal.raise_signal(signum)
        return
    driver.append(pid)
    for signum in pending[before_fork:]:  # came between the fork and the line above
        _forward(pid, signum)
    with contextlib.suppress(OSError):  # both sides set it, so neither races the other
        os.setpgid(pid, pid)
    terminal = _hand_terminal_to(pid)
    code = _supervise(pid, on_death)
    if terminal is not None:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(terminal, os.getpgrp())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _hand_terminal_to(pgid: int) -> int | None:
    """Make ``pgid`` the foreground group of the terminal on stdin if ours is; the terminal's fd, or None."""
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            return None
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a group handing the terminal over is not stopped
        os.tcsetpgrp(fd, pgid)
        os.killpg(pgid, signal.SIGCONT)  # had it touched the terminal a moment too early, it was stopped
        return fd
    except (OSError, ValueError, AttributeError):  # no stdin, or not a terminal we control
        return None


def _die_with(parent: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def _supervise(pid: int, on_death: Callable[[signal.Signals], None]) -> int:
    """Wait for the driver; its exit status for the shell (128 + the signal that killed it)."""
    try:
        _, status = os.waitpid(pid, 0)  # retried by Python after each forwarded signal
    except ChildProcessError:  # pragma: no cover - reaped elsewhere; nothing left to wait for
        status = 0
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signum = signal.Signals(-code)
        try:
            on_death(signum)
        except BaseException as exc:  # report and still exit with the driver's status
            print(f"rlflow run: cleaning up after the driver failed: {exc}", file=sys.stderr)
        code = 128 + signum
    return code


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
