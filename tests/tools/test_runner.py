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
LIMIT = 320  # max_tool_response_length: room for the whole of each error observation below
ESCAPES = ("fork_exec", "ctypes_system", "sqlite_uri", "sqlite_attach", "sqlite_vacuum_into", "mkfifo", "unix_socket")


@pytest.fixture(scope="module")
def runner():
    config = MultiTurnConfig(
        enable=True,
        tool_config_path="tools.yaml",
        function_tool_path="function_tools.py",
        tool_timeout_s=2.0,
        max_tool_response_length=LIMIT,
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
    assert not huge.error and len(huge.text) < LIMIT + 20 and "...(truncated)..." in huge.text  # verl's middle cut
    assert write.error and "PermissionError" in write.text and victim.read_text() == "original"
    assert sqlite.error and "read-only" in sqlite.text and not database.exists()
    assert memory.error and "MemoryError" in memory.text  # the tool process's address space is capped
    assert spawn.error and "may not subprocess.Popen" in spawn.text
    assert hang.error and "no result within multi_turn.tool_timeout_s 2 s" in hang.text  # the tools' own key
    assert after.text == "111" and not after.error


def test_the_standard_librarys_ways_out_are_closed(runner, tmp_path):
    """The issue's escapes: fork_exec without Popen, ctypes' system(), SQLite written through a URI whose query
    only looks read-only, ATTACH and VACUUM INTO, a FIFO and a Unix socket; none leaves a file outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    results = runner.call([call("hostile", mode=mode, path=str(outside / mode)) for mode in ESCAPES])
    assert sorted(p.name for p in outside.iterdir()) == []
    texts = dict(zip(ESCAPES, (r.text for r in results), strict=True))
    assert all(r.error for r in results), texts
    assert "may not start a process (_posixsubprocess.fork_exec)" in texts["fork_exec"]
    assert "may not ctypes.dlopen" in texts["ctypes_system"]
    assert "outside the working directory read-only" in texts["sqlite_uri"]
    assert "not authorized" in texts["sqlite_attach"] and "authorization denied" in texts["sqlite_vacuum_into"]
    assert "may not os.mkfifo" in texts["mkfifo"] and "may not bind a Unix socket" in texts["unix_socket"]


def test_odd_tool_metrics_are_dropped_and_a_killed_tool_process_is_named(runner):
    """A BaseTool metric with a tuple key no longer ends the tool process (verl drops a tool's metrics); a
    process that dies is named as the tool process, with the likely cause of a SIGKILL."""
    starts = runner._runner.starts
    (measured,) = runner.call([call("hostile", mode="tuple_metric")])
    assert (measured.text, measured.error, runner._runner.starts) == ("measured", False, starts)
    (killed,) = runner.call([call("hostile", mode="kill")])  # alone: the calls of one message share the process
    (after,) = runner.call([call("add", a=1, b=1)])
    assert killed.error and killed.text == (
        "Error executing tool 'hostile': the tool process killed by signal 9 (SIGKILL: most often the kernel's "
        "out-of-memory killer)"
    )
    assert after.text == "102" and runner._runner.starts == starts + 1


def test_an_answer_over_the_message_cap_names_the_tool_process():
    config = MultiTurnConfig(enable=True, tool_config_path="tools.yaml", max_tool_response_length=4 << 20)
    big = ToolRunner(config, ASSETS)
    try:
        (huge,) = big.call([call("hostile", mode="huge")])
    finally:
        big.close()
    assert huge.error and huge.text == (
        "Error executing tool 'hostile': the tool process sent a message over 1048576 bytes"
    )


def test_a_tool_file_that_does_not_load_is_named(tmp_path):
    (tmp_path / "broken.py").write_text("raise ImportError('no such thing')\n")
    config = MultiTurnConfig(enable=True, function_tool_path="broken.py")
    with pytest.raises(ToolError, match="broken.py cannot be loaded.*no such thing"):
        ToolRunner(config, tmp_path)


def test_error_observations_are_cut_and_hold_no_host_path(tmp_path):
    """Errors are cut to max_tool_response_length like any answer; the tool log keeps them whole."""
    from rlflow.tools.observation import truncate

    config = MultiTurnConfig(enable=True, tool_config_path="tools.yaml", max_tool_response_length=60)
    log_path = tmp_path / "tools" / "rank0.log"
    small = ToolRunner(config, ASSETS, log_path)
    try:
        raised, written, unknown = small.call(
            [call("hostile", mode="raise"), call("hostile", mode="write", path=str(tmp_path / "x")), call("x" * 500)]
        )
    finally:
        small.close()
    whole = "Error executing tool 'hostile': RuntimeError at verl_tools.py:41 in execute: the tool broke"
    assert raised.text == truncate(whole, 60, "middle")  # the line of the user's tool file, relative
    assert len(unknown.text) <= 60 + len("...(truncated)...")
    for result in (raised, written, unknown):
        assert result.error and str(ASSETS) not in result.text and str(tmp_path) not in result.text
    log = log_path.read_text()
    assert "tool 'hostile' raised RuntimeError: RuntimeError at verl_tools.py:41 in execute: the tool broke" in log
    assert "tools may not write 'x': write under the working directory" in log
    assert '"name": "add"' in log  # the tool process's own output (verl's BaseTool prints its schema)


def test_a_tool_that_cannot_load_is_named_by_its_entry(tmp_path):
    (tmp_path / "picky.py").write_text(
        "from verl.tools.base_tool import BaseTool\n\n\nclass Picky(BaseTool):\n"
        "    def __init__(self, config, tool_schema):\n        raise ValueError('no endpoint configured')\n"
    )
    (tmp_path / "tools.yaml").write_text("tools:\n  - class_name: picky.Picky\n    config: {type: native}\n")
    config = MultiTurnConfig(enable=True, tool_config_path="tools.yaml")
    with pytest.raises(ToolError) as caught:
        ToolRunner(config, tmp_path)
    message = str(caught.value)
    assert message.startswith("the tools of tools.yaml cannot be loaded: tools.yaml tools[0] (picky.Picky): ")
    assert "ValueError at picky.py:6 in __init__: no endpoint configured" in message
    assert "reward" not in message and '{"tools"' not in message


def test_a_class_that_does_not_exist_fails_before_any_process_starts(tmp_path):
    (tmp_path / "tools.yaml").write_text(
        "tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n    config: {type: native}\n"
    )
    with pytest.raises(ToolError, match=r"tools.yaml:2:17: tools\[0\].class_name: module 'verl.tools.gsm8k_tool'"):
        ToolRunner(MultiTurnConfig(enable=True, tool_config_path="tools.yaml"), tmp_path)


def test_a_turns_many_calls_of_a_plain_function_tool_all_run():
    """verl runs a plain @function_tool on a thread per call: 32 at once must fit in the capped address space."""
    runner = ToolRunner(MultiTurnConfig(enable=True, function_tool_path="function_tools.py"), ASSETS)
    try:
        results = runner.call([call("multiply", a=i, b=2) for i in range(32)])
    finally:
        runner.close()
    assert [r.text for r in results] == [str(2 * i) for i in range(32)]
