"""The tool process: verl tools used unchanged, every bad call an error observation, hostile tools contained.

One runner (one tool process) serves the module: a verl ``BaseTool`` subclass and a verl
``@function_tool`` file from ``assets/``, loaded as verl loads them, and a tool that raises,
hangs, answers megabytes, eats memory, starts a process or writes files on request.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.hermes import ToolCall
from rlflow.tools.runner import ToolError, ToolRunner

ASSETS = Path(__file__).parent / "assets"


@pytest.fixture(scope="module")
def runner():
    config = MultiTurnConfig(
        enable=True,
        tool_config_path="tools.yaml",
        function_tool_path="function_tools.py",
        tool_timeout_s=2.0,
        max_tool_response_length=40,
    )
    runner = ToolRunner(config, ASSETS)
    yield runner
    runner.close()


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name, json.dumps(arguments))


def test_schemas_of_both_kinds_of_tool(runner):
    assert sorted(runner.schemas) == ["add", "hostile", "multiply", "shout"]
    assert runner.schemas["multiply"].function.parameters.required == ["a", "b"]  # inferred by verl from the hints


def test_verl_tools_run_unchanged(runner):
    results = runner.call([call("add", a=1, b=2), call("multiply", a=3, b=4), call("shout", text="hi")])
    assert [r.text for r in results] == ["103", "12", "HI"]  # add's config offset (100) reached the BaseTool
    assert not any(r.error for r in results)


def test_a_turns_calls_run_concurrently(runner):
    start = time.monotonic()
    results = runner.call([call("hostile", mode="sleep") for _ in range(4)])
    assert [r.text for r in results] == ["slept"] * 4
    assert time.monotonic() - start < 3.0  # four 1-second calls, one after another, would take 4
    assert all(0.9 < r.seconds < 3.0 for r in results)  # each call's own time, measured in the tool process


def test_bad_calls_are_answered_without_running(runner):
    results = runner.call(
        [
            ToolCall("", error="the tool call is not valid JSON: Expecting value"),
            call("ad", a=1, b=2),
            call("add", a="1", b=2),
            call("add", a=True, b=2),
            call("add", a=1),
            call("add", a=1, b=2, c=3),
            call("hostile", mode="x" * 10_000),
        ]
    )
    assert all(r.error and r.seconds == 0 for r in results)
    texts = [r.text for r in results]
    assert "not valid JSON" in texts[0]
    assert "Unknown function 'ad'; did you mean 'add'?" in texts[1]
    assert "must be integer, got str" in texts[2] and "must be integer, got bool" in texts[3]
    assert "Missing required arguments for 'add': ['b']" in texts[4]
    assert "Unknown argument 'c'" in texts[5]
    assert "at most 8192" in texts[6]
    # the metrics count a call of no known tool as "(invalid)": a made-up name never becomes a metric name
    assert [r.name for r in results] == ["(invalid)", "(invalid)", "add", "add", "add", "add", "hostile"]


def test_hostile_tools_are_cut_off_and_contained(runner, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    database = tmp_path / "victim.db"
    results = runner.call(
        [
            call("hostile", mode="raise"),
            call("hostile", mode="huge"),
            call("hostile", mode="write", path=str(victim)),
            call("hostile", mode="sqlite", path=str(database)),
            call("hostile", mode="memory"),
            call("hostile", mode="spawn"),
            call("hostile", mode="hang"),
            call("add", a=5, b=6),  # after the hang: a new tool process answers
        ]
    )
    raised, huge, write, sqlite, memory, spawn, hang, after = results
    assert raised.error and "RuntimeError" in raised.text and "the tool broke" in raised.text
    assert not huge.error and len(huge.text) < 100 and "...(truncated)..." in huge.text  # verl's middle cut
    assert write.error and "PermissionError" in write.text and victim.read_text() == "original"
    assert sqlite.error and "read-only" in sqlite.text and not database.exists()
    assert memory.error and "MemoryError" in memory.text  # the tool process's address space is capped
    assert spawn.error and "may not subprocess.Popen" in spawn.text
    assert hang.error and "no result within timeout_s 2 s" in hang.text
    assert after.text == "111" and not after.error


def test_a_tool_file_that_does_not_load_is_named(tmp_path):
    (tmp_path / "broken.py").write_text("raise ImportError('no such thing')\n")
    config = MultiTurnConfig(enable=True, function_tool_path="broken.py")
    with pytest.raises(ToolError, match="broken.py cannot be loaded.*no such thing"):
        ToolRunner(config, tmp_path)
