"""The driver's supervising parent: it cleans up after a native death, forwards signals, and takes the driver
with it when killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

_DRIVER = """
import os, signal, sys, time
from rlflow.runtime.supervise import fork_driver
fork_driver(lambda signum: print("cleaned up after", signum.name, file=sys.stderr))
got = []
if sys.argv[1] == "count":  # counts the SIGINTs it gets, then says how many
    signal.signal(signal.SIGINT, lambda *_: got.append(1))
print(os.getpid(), flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
elif sys.argv[1] == "abort":
    os.abort()
elif sys.argv[1] == "exit":
    sys.exit(3)
elif sys.argv[1] == "count":
    while not got:
        time.sleep(0.01)
    time.sleep(1.0)
    print("sigints", len(got), "foreground", os.tcgetpgrp(0) == os.getpgrp(), flush=True)
    sys.exit(0)
time.sleep(60)
"""


def _start(mode: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, int(proc.stdout.readline())


@pytest.mark.parametrize(("mode", "status", "said"), [("kill", 137, "SIGKILL"), ("abort", 134, "SIGABRT")])
def test_a_driver_that_dies_natively_is_cleaned_up_after(mode, status, said):
    proc, driver = _start(mode)
    assert driver != proc.pid
    assert proc.wait(timeout=30) == status
    assert f"cleaned up after {said}" in proc.stderr.read()


def test_a_driver_that_exits_by_itself_passes_its_status_on_and_nothing_else():
    proc, _ = _start("exit")
    assert proc.wait(timeout=30) == 3
    assert "cleaned up" not in proc.stderr.read()


def test_sigterm_reaches_the_driver_once_and_killing_the_parent_kills_the_driver():
    proc, driver = _start("sleep")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    assert "cleaned up after SIGTERM" in proc.stderr.read()

    proc, driver = _start("sleep")
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(driver) and psutil.Process(driver).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the driver outlived its killed parent"
        time.sleep(0.05)


def test_ctrl_c_at_a_terminal_reaches_the_driver_once():
    """The driver's group is the terminal's foreground group (it may read the terminal), and it gets one SIGINT."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()

    def own_terminal() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, "count"], stdin=slave, stdout=slave, stderr=slave, preexec_fn=own_terminal
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 30
    while b"\n" not in output and time.monotonic() < deadline:  # the driver's pid: it is running
        output += os.read(master, 1024)
    os.write(master, b"\x03")  # Ctrl-C, as typed
    while b"\n" not in output.partition(b"sigints")[2] and time.monotonic() < deadline:  # its whole last line
        try:
            output += os.read(master, 1024)
        except OSError:
            break
    assert proc.wait(timeout=30) == 0
    os.close(master)
    assert b"sigints 1 foreground True" in output, output
