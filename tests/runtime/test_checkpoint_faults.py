"""Checkpoints under faults: the driver killed mid-checkpoint, Ctrl-C, a full disk.

Each ends with the last complete checkpoint usable and no step lost or repeated after resume.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from runtime_helpers import REPO, kill_tree, read_jsonl, rlflow, small_sets, start_rlflow

from rlflow.runtime import checkpoints

PIPELINE = str(REPO / "pipelines" / "bird_grpo.yaml")
QUIET = ("trainer.val_before_train=false", "trainer.test_freq=-1")


def _wait_for(predicate, proc: subprocess.Popen, timeout: float, poll: float = 0.005) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(poll)
    return False


def test_driver_killed_mid_checkpoint_resumes_from_the_last_complete_one(tmp_path):
    import psutil

    run_dir = tmp_path / "run"
    sets = small_sets("trainer.total_steps=4", "trainer.save_freq=1", *QUIET)
    proc = start_rlflow("run", PIPELINE, "--run-dir", str(run_dir), *sets)
    ckpts = run_dir / "checkpoints"
    family, caught = [], False
    try:
        assert _wait_for(lambda: (ckpts / "step_1").exists(), proc, timeout=900, poll=0.1), proc.stderr.read()[-2000:]
        family = psutil.Process(proc.pid).children(recursive=True)  # Ray's processes, for clean-up below
        caught = _wait_for(lambda: (ckpts / ".tmp-step_2").exists(), proc, timeout=900)
        os.kill(proc.pid, signal.SIGKILL)  # at once: the driver is what renames a finished checkpoint
    finally:
        kill_tree(proc)
        for child in family:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
    assert caught, f"never saw checkpoint 2 being written; stderr: {proc.stderr.read()[-2000:]}"
    partial = (ckpts / ".tmp-step_2").exists()
    # killed mid-write: only the temporary copy of step 2 exists; the rename may rarely win the race
    assert checkpoints.latest(ckpts).name == ("step_1" if partial else "step_2")
    resumed = rlflow("run", PIPELINE, "--resume", str(run_dir), *sets)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    if partial:
        assert "ignored half-written checkpoints .tmp-step_2" in resumed.stderr
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]
    assert not any(p.name.startswith(".tmp-") for p in ckpts.iterdir())


@pytest.mark.parametrize(
    ("signum", "status", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")]
)
def test_ctrl_c_or_sigterm_stops_cleanly_and_the_run_resumes(tmp_path, signum, status, said):
    """Ctrl-C, or a scheduler's SIGTERM (Ray's own SIGTERM handler would dump a stack and skip the clean-up)."""
    import psutil

    run_dir = tmp_path / "run"
    sets = small_sets("trainer.total_steps=3", "trainer.save_freq=1", *QUIET)
    proc = start_rlflow("run", PIPELINE, "--run-dir", str(run_dir), *sets)
    try:
        assert _wait_for(lambda: (run_dir / "checkpoints" / "step_1").exists(), proc, timeout=600, poll=0.2)
        family = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == status, err[-2000:]
    assert f"{said}: workers and backends were stopped" in err and "Traceback" not in err
    assert f"is complete (continue with --resume {run_dir})" in err, err[-2000:]
    assert "SIGTERM received" not in err, "Ray's stack dump"
    gone, alive = psutil.wait_procs(family, timeout=30)
    assert not alive, f"left running after Ctrl-C: {[p.name() for p in alive]}"
    resumed = rlflow("run", PIPELINE, "--resume", str(run_dir), *sets)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    steps = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")]
    assert steps == sorted(set(steps)) and steps[-1] == 3


def test_a_run_stopped_before_its_first_checkpoint_keeps_what_it_logged(tmp_path):
    """Ctrl-C is a stop asked for, not a failure: the metrics of the steps done stay (nothing to resume from)."""
    run_dir = tmp_path / "run"
    proc = start_rlflow("run", PIPELINE, "--run-dir", str(run_dir), *small_sets("trainer.total_steps=50", *QUIET))
    try:
        assert _wait_for(lambda: (run_dir / "metrics.jsonl").exists(), proc, timeout=600, poll=0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == 130, err[-2000:]
    assert f"no checkpoint was complete yet: {run_dir} keeps what was logged" in err, err[-2000:]
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")][0] == 1
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").iterdir())


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 70 MB filesystem: room for one checkpoint of the tiny model (~46 MB), not two."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=70m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_out_of_disk_during_a_checkpoint_fails_clearly_and_keeps_the_last_one(small_disk):
    run_dir = small_disk / "run"
    result = rlflow(
        "run", PIPELINE, "--run-dir", str(run_dir), *small_sets("trainer.total_steps=3", "trainer.save_freq=1", *QUIET)
    )
    assert result.returncode == 1
    assert "save_checkpoint" in result.stderr and "No space left on device" in result.stderr
    assert "Traceback" not in result.stderr
    ckpts = run_dir / "checkpoints"
    assert [p.name for p in checkpoints.complete_checkpoints(ckpts)] == ["step_1"]
    assert not any(p.name.startswith(".tmp-") for p in ckpts.iterdir()), "the partial checkpoint was removed"
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1]


def test_out_of_disk_during_an_async_checkpoint_is_the_documented_line(small_disk):
    """separate_async also saves the batches sampled ahead (torch on the driver, whose full-disk error is a
    RuntimeError of its own words): the same one line as any checkpoint, not torch's traceback."""
    run_dir = small_disk / "run"
    async_pipeline = str(REPO / "pipelines" / "bird_grpo_async.yaml")
    sets = small_sets("trainer.total_steps=3", "trainer.save_freq=1", *QUIET)
    result = rlflow("run", async_pipeline, "--run-dir", str(run_dir), *sets)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "No space left on device for the checkpoint" in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    ckpts = run_dir / "checkpoints"
    assert not any(p.name.startswith(".tmp-") for p in ckpts.iterdir()), "the partial checkpoint was removed"
