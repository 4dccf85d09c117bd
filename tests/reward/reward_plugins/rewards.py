"""Reward functions for the tests of the reward_function machinery, loaded by file path like a user's own.

Each misbehaves on cue: the response text says what to do (``raise``, ``sleep``, ``nan``...).
"""

from __future__ import annotations

import math
import os
import subprocess
import time
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
    if solution_str == "exit":
        raise SystemExit(1)
    returns = {"nan": math.nan, "inf": -math.inf, "none": None, "str": "1.0", "nodict": {"acc": 1.0}}
    if solution_str in returns:
        return returns[solution_str]
    return {"score": 1.0, "acc": 1.0}


def always_raises(data_source, solution_str, ground_truth, extra_info=None):
    raise KeyError(data_source)


def pid(data_source, solution_str, ground_truth, extra_info=None):
    return float(os.getpid())


def one_argument(solution_str):
    return 0.0
