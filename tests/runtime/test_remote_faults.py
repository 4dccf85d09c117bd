"""The reference backend's server dying: the run fails naming the backend, or recovers by restarting.

The server is a real OS process (started by the run); the test kills it with SIGKILL. Its log is
``<run dir>/backends/arctic.log``, written by every server the run starts.
"""

from __future__ import annotations

import json
import os
import signal
import time

from runtime_helpers import REPO, kill_tree, read_jsonl, small_sets, start_rlflow

PIPELINE = str(REPO / "pipelines" / "bird_grpo_remote.yaml")
TINY = (
    "trainer.train_batch_size=2",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=2",
    "algorithm.n=2",
    "data.max_response_length=16",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
)


def _backend_pid(run_dir) -> int | None:
    try:
        return json.loads((run_dir / "workers.json").read_text())["arctic"]["backend"]["pid"]
    except (FileNotFoundError, KeyError, json.JSONDecodeError):
        return None


def _steps(run_dir) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [m["step"] for m in read_jsonl(path)] if path.exists() else []


def _wait(predicate, proc, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_backend_killed_mid_step_fails_within_the_watchdog_naming_it(tmp_path):
    run_dir = tmp_path / "run"
    # a checkpoint at step 1: a run that fails before its first one leaves no directory (test_run_failures.py)
    sets = small_sets(*TINY, "trainer.total_steps=6", "trainer.save_freq=1")
    proc = start_rlflow("run", PIPELINE, "--run-dir", str(run_dir), *sets)
    try:
        assert _wait(lambda: 1 in _steps(run_dir), proc, timeout=600)
        trace = run_dir / "trace.jsonl"
        assert _wait(lambda: any(r["stage"] == "ref_log_prob" and r["step"] == 2 for r in read_jsonl(trace)), proc, 300)
        pid = _backend_pid(run_dir)
        os.kill(pid, signal.SIGKILL)  # the update of step 2 is next
        killed = time.time()
        _, err = proc.communicate(timeout=300)
        took = time.time() - killed
    finally:
        kill_tree(proc)
    assert proc.returncode == 1, err[-2000:]
    assert "remote backend of resource 'arctic' is gone" in err and "reference" in err
    assert "Traceback" not in err
    assert took < 120, f"noticed the dead backend after {took:.0f} s"
    # the server's log is the run's, and survives the failure for the post-mortem
    assert f"(pid {pid})" in (run_dir / "backends" / "arctic.log").read_text()


def test_twenty_steps_survive_two_backend_restarts(tmp_path):
    run_dir = tmp_path / "run"
    sets = small_sets(*TINY, "trainer.total_steps=20", "trainer.save_freq=1", "trainer.max_restarts=2")
    proc = start_rlflow("run", PIPELINE, "--run-dir", str(run_dir), *sets)
    killed = []
    try:
        for at_step in (5, 12):
            assert _wait(lambda at_step=at_step: at_step in _steps(run_dir), proc, timeout=900), proc.stderr.read()[
                -2000:
            ]
            pid = _backend_pid(run_dir)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            assert _wait(lambda pid=pid: _backend_pid(run_dir) not in (None, pid), proc, timeout=600), "no new backend"
        _, err = proc.communicate(timeout=900)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, err[-3000:]
    assert err.count("restart ") == 2
    assert _steps(run_dir) == list(range(1, 21)), "no step lost or repeated"
    trace = read_jsonl(run_dir / "trace.jsonl")
    assert {r["attempt"] for r in trace} == {0, 1, 2}
    updates = [r["step"] for r in trace if r["stage"] == "update_actor"]
    assert set(updates) == set(range(1, 21))
    redone = {s for s in updates if updates.count(s) > 1}
    assert len(redone) <= 2, f"only a step in flight at a kill is run again (from its checkpoint): {redone}"
    log = (run_dir / "backends" / "arctic.log").read_text()  # every server of the run wrote to it
    assert all(f"(pid {pid})" in log for pid in [*killed, _backend_pid(run_dir)])
