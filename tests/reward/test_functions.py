"""Reward function references: parsing, loading by module or file, and what is refused with which fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rlflow.reward.functions import FunctionLoadError, load_function, parse_reference

PLUGINS = Path(__file__).parent / "reward_plugins"


def load(text: str, root: Path = PLUGINS):
    return load_function(parse_reference(text), root)


def test_module_and_file_references_parse():
    ref = parse_reference("rlflow.reward.math_answer:compute_score")
    assert (ref.module, ref.path, ref.attribute) == ("rlflow.reward.math_answer", None, "compute_score")
    ref = parse_reference("rewards/my_reward.py:Scorer.score")
    assert (ref.module, ref.path, ref.attribute, ref.default_name) == (
        None,
        "rewards/my_reward.py",
        "Scorer.score",
        "score",
    )
    assert parse_reference("my_reward.py:f").path == "my_reward.py"


@pytest.mark.parametrize("text", ["rlflow.reward.math_answer", "mod:", "mod:1x", "my mod:f", ":f"])
def test_bad_references_are_refused_with_the_format(text):
    with pytest.raises(FunctionLoadError) as info:
        parse_reference(text)
    assert "package.module:function" in info.value.fix


def test_a_module_reference_loads_the_callable():
    from rlflow.reward import math_answer

    assert load("rlflow.reward.math_answer:compute_score") is math_answer.compute_score


def test_a_file_reference_is_relative_to_the_root_and_loaded_once():
    fn = load("rewards.py:length")
    assert fn("d", "abcd", None, None) == 0.4
    assert load(f"{PLUGINS / 'rewards.py'}:length") is fn  # the same file, by its absolute path: not run again
    assert sum(1 for name in sys.modules if name.startswith("rlflow_reward_file_rewards_")) == 1


@pytest.mark.parametrize(
    "text, message, fix",
    [
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz': ModuleNotFoundError", "file path"),
        ("missing.py:f", "reward function file", "project root"),
        ("broken_import.py:f", "failed: RuntimeError: this module needs a GPU", "fix the error"),
        ("rewards.py:nope", "has no attribute 'nope'", "callables there: always_raises"),
        ("rewards.py:NOT_CALLABLE", "is a int, not a callable", "name a function"),
        ("rewards.py:one_argument", "cannot be called as fn(data_source=..., solution_str=...", "def one_argument("),
    ],
)
def test_what_cannot_load_says_why_and_how_to_fix_it(text, message, fix):
    with pytest.raises(FunctionLoadError) as info:
        load(text)
    assert message in info.value.message and fix in info.value.fix


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_special_file_as_reward_file_is_refused_at_once(tmp_path, kind):
    import os
    import re

    path = tmp_path / "reward.py"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    words = {"fifo": "a FIFO (named pipe)", "device": "a character device", "folder": "a folder"}[kind]
    with pytest.raises(FunctionLoadError, match=f"cannot read .*: {re.escape(words)}, not a regular file"):
        load("reward.py:score", tmp_path)
