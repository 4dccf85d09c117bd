"""Reward functions for the tests of the reward_function machinery, loaded by file path like a user's own.

Each misbehaves on cue: the response text says what to do (``raise``, ``sleep``, ``nan``...).
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

NOT_CALLABLE = 42


def length(data_source, solution_str, ground_truth, extra_info=None):
    return len(solution_str) / 10


def with_extras(data_source, solution_str, ground_truth, extra_info=None):
    correct = float(solution_str == ground_truth)
    return {"score": correct, "acc": correct, "format_ok": 1, "answer": solution_str}


def keyed_by_source(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 0.5, "len": len(solution_str)} if data_source == "long" else 0.25


def on_cue(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "raise":
        raise ValueError(f"cannot score {solution_str!r}")
    if solution_str == "sleep":
        time.sleep(30)
    if solution_str == "hang":
        while True:
            pass
    if solution_str == "hog":
        return len(bytearray(4 * 2**30))
    if solution_str == "spawn":  # a helper process, then a hang: both must go
        helper = subprocess.Popen(["sleep", "60"])
        Path(extra_info["pid_file"]).write_text(str(helper.pid))
        time.sleep(30)
    if solution_str == "die":
        os._exit(3)
    if solution_str == "abort":
        os.abort()
    if solution_str == "interrupt":  # not caught for a row: it ends the process that serves the others
        raise KeyboardInterrupt("stop here")
    if solution_str == "exit":
        raise SystemExit(1)
    returns = {"nan": math.nan, "inf": -math.inf, "none": None, "str": "1.0", "nodict": {"acc": 1.0}}
    returns.update({"huge": 1e308, "hugeint": 10**400, "hugedict": {"score": -1e19}})
    if solution_str in returns:
        return returns[solution_str]
    return {"score": 1.0, "acc": 1.0}


def always_raises(data_source, solution_str, ground_truth, extra_info=None):
    raise KeyError(data_source)


def pid(data_source, solution_str, ground_truth, extra_info=None):
    return float(os.getpid())


def one_argument(solution_str):
    return 0.0


_FORGED = []  # the forged Connection objects stay referenced: dropping one would close the real pipe


def _pipe() -> Connection:
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                _FORGED.append(Connection(int(fd)))
                return _FORGED[-1]
        except OSError:
            continue
    raise RuntimeError("no pipe found")


def forger(data_source, solution_str, ground_truth, extra_info=None):
    """Writes on the pipe to the runner itself: a well-formed answer to another call, or garbage."""
    if solution_str == "forge":
        _pipe().send_bytes(json.dumps(["ok", 10**6, 1e9, {"acc": 1.0}, 0]).encode())
    elif solution_str == "garbage":
        _pipe().send_bytes(b"\x80\x04not json")
    elif solution_str == "nan":
        _pipe().send_bytes(b'["ok", 0, NaN, {}, 0]')
    return 0.5


def detach(data_source, solution_str, ground_truth, extra_info=None):
    """Starts a daemon that leaves the session (double fork + setsid) and sleeps; writes its pid."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            Path(extra_info["pid_file"]).write_text(str(os.getpid()))
            time.sleep(60)
        os._exit(0)
    deadline = time.monotonic() + 5
    while not Path(extra_info["pid_file"]).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return 1.0


def lift_memory_limit(data_source, solution_str, ground_truth, extra_info=None):
    """Tries to raise its own address-space limit, then allocates 4 GiB."""
    try:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
    return len(bytearray(4 * 2**30))


def many_metrics(data_source, solution_str, ground_truth, extra_info=None):
    """100 extra numbers plus names with path parts and control characters."""
    extras = {f"m{i:03d}": float(i) for i in range(100)}
    return {"../../etc/passwd": 1.0, "a/b": 2.0, "red\x1b[31m\n": 3.0, "score": 1.0, **extras}


def chatty(data_source, solution_str, ground_truth, extra_info=None):
    """Prints 3 MiB to stdout and a line to stderr."""
    print("hello from stdout")
    print("x" * (3 * 2**20))
    print("hello from stderr", file=sys.stderr)
    return 1.0
