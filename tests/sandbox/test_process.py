"""The sandbox with real child processes (serving reward functions): deadlines, restarts, deaths, forged
messages, memory and output caps, and every process a call started ended with its child."""

from __future__ import annotations

import os
import time

import pytest
from reward_calls import PLUGINS, calls

from rlflow.reward.function_calls import FunctionRunner


def test_the_child_is_started_once_and_kept(runner_of):
    runner = runner_of("pid")
    first = runner.run(calls("a", "b"))
    second = runner.run(calls("c"))
    assert runner.starts == 1 and {o.score for row in first + second for o in row} == {first[0][0].score}
    assert first[0][0].score != os.getpid()


def test_a_call_past_the_deadline_is_killed_and_the_rest_still_scored(runner_of):
    runner = runner_of("on_cue", "length", timeout_s=0.5)
    start = time.monotonic()
    out = runner.run(calls("ok", "sleep", "ok", "hang", "ok"))
    assert time.monotonic() - start < 5
    assert [row[0].failure for row in out] == [None, "timeout", None, "timeout", None]
    assert [row[1].score for row in out] == [0.2, 0.5, 0.2, 0.4, 0.2]  # the other function scores every row
    assert runner.starts == 3  # restarted after each timeout


def test_a_function_that_hangs_on_every_row_costs_three_timeouts_not_one_per_row(runner_of):
    runner = runner_of("on_cue", "length", timeout_s=0.3)
    start = time.monotonic()
    out = runner.run(calls(*["sleep"] * 20))
    assert time.monotonic() - start < 5  # 20 x 0.3 s would be 6 s
    assert all(row[0].failure == "timeout" for row in out)
    assert "3 calls in a row" in out[-1][0].detail and runner.starts == 4
    assert [row[1].score for row in out] == [0.5] * 20  # the other function still scores every row


def test_what_a_timed_out_call_started_is_killed_with_it(runner_of, tmp_path):
    runner = runner_of("on_cue", timeout_s=1.0)
    call = {
        "data_source": "d",
        "solution_str": "spawn",
        "ground_truth": "",
        "extra_info": {"pid_file": str(tmp_path / "pid")},
    }
    assert runner.run([call])[0][0].failure == "timeout"
    helper = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and waiting for its reaper, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_that_dies_is_an_error_and_is_replaced(runner_of):
    runner = runner_of("on_cue")
    out = runner.run(calls("die", "ok"))
    assert out[0][0].failure == "error" and out[0][0].kind == "process died"
    assert "exited with code 3" in out[0][0].detail
    assert out[1][0].score == 1.0 and runner.starts == 2


@pytest.mark.parametrize(
    "text, said",
    [
        ("abort", "the reward process killed by signal 6 (SIGABRT)"),
        ("interrupt", "the reward process failed: KeyboardInterrupt: stop here (exited with code 1)"),
    ],
)
def test_a_child_that_dies_is_reported_with_the_real_cause(runner_of, text, said):
    runner = runner_of("on_cue")
    out = runner.run(calls(text, "ok"))
    assert out[0][0].kind == "process died" and out[0][0].detail == said
    assert out[1][0].score == 1.0 and runner.starts == 2


@pytest.mark.parametrize("text", ["forge", "garbage", "nan"])
def test_a_forged_or_malformed_message_is_that_rows_error_and_costs_the_child(runner_of, text):
    runner = runner_of("forger")
    out = runner.run(calls("ok", text, "ok", "ok"))
    assert out[1][0].failure == "error" and out[1][0].kind == "bad message", out[1][0]
    assert [row[0].score for row in out] == [0.5, 0.0, 0.5, 0.5], "no row took the forged score"
    assert runner.starts == 2


def test_a_process_that_leaves_the_session_is_ended_with_the_child(runner_of, tmp_path):
    runner = runner_of("detach")
    call = {"data_source": "d", "solution_str": "", "ground_truth": "", "extra_info": {"pid_file": str(tmp_path / "p")}}
    assert runner.run([call])[0][0].score == 1.0
    daemon = int((tmp_path / "p").read_text())
    assert _alive(daemon) and os.getsid(daemon) != os.getsid(runner._child.proc.pid), "it left the session"
    runner.close()
    deadline = time.monotonic() + 5
    while _alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(daemon)


def test_a_function_cannot_lift_its_own_memory_limit(runner_of):
    out = runner_of("lift_memory_limit", max_memory_mb=512).run(calls("x"))
    assert out[0][0].kind == "raised MemoryError", out[0][0]


def test_extra_metrics_are_capped_and_their_names_sanitised(runner_of):
    out = runner_of("many_metrics").run(calls("x"))[0][0]
    assert len(out.extras) == 64 and out.dropped == 103 - 64
    assert list(out.extras)[:3] == ["____etc_passwd", "a_b", "red__31m_"]
    assert not any(part in key for key in out.extras for part in ("/", "..", "\x1b", "\n"))


def test_output_goes_to_a_capped_log_file(tmp_path):
    (tmp_path / "run").mkdir()
    log = tmp_path / "run" / "rewards" / "reward.rank0.log"
    runner = FunctionRunner(["rewards.py:chatty"], PLUGINS, 5.0, 1024, log)
    assert runner.run(calls("x"))[0][0].score == 1.0
    runner.close()
    text = log.read_text()
    assert text.startswith("hello from stdout\n") and len(text) < 2**20 + 200
    assert "more bytes of output dropped past the cap" in text


def test_memory_is_capped_in_the_child(runner_of):
    runner = runner_of("on_cue", max_memory_mb=512)
    out = runner.run(calls("hog", "ok"))
    assert out[0][0].kind == "raised MemoryError" and out[1][0].score == 1.0


def test_the_child_ends_when_the_runner_closes(runner_of):
    runner = runner_of("length")
    runner.run(calls("x"))
    proc = runner._child.proc
    runner.close()
    assert proc.poll() is not None
