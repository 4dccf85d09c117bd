"""A failed run leaves nothing half-made: no directory before the first checkpoint, a resumable one after.

The failure is a native abort (SIGABRT: no Python clean-up runs in that process) of the driver or of
a worker, through the real CLI, Ray and the tiny model.
"""

from __future__ import annotations

import pytest
from runtime_helpers import REPO, rlflow, small_sets

from rlflow.runtime import checkpoints
from rlflow.runtime.run_lock import claim_run_dir

FAST = ("trainer.val_before_train=false", "trainer.test_freq=-1")


def _pipeline_with_abort(project_dir, on: str, at_step: int) -> str:
    text = (REPO / "pipelines" / "bird_grpo.yaml").read_text()
    text += f"  - {{name: crash, uses: test_abort, on: {on}, with: {{at_step: {at_step}}}}}\n"
    (project_dir / "abort.yaml").write_text(text)
    return "abort.yaml"


@pytest.mark.parametrize(("on", "status"), [("driver", 134), ("reward_pool", 1)])
def test_a_run_that_dies_before_its_first_checkpoint_leaves_no_directory(project_dir, on, status):
    """The abort comes at step 2, after step 1's metrics were written but before any checkpoint."""
    pipeline = _pipeline_with_abort(project_dir, on, at_step=2)
    sets = small_sets("trainer.total_steps=3", "trainer.save_freq=3", *FAST)
    result = rlflow("run", pipeline, *sets, cwd=project_dir, timeout=600)
    assert result.returncode == status, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    if on == "driver":
        assert "the driver process died of SIGABRT" in result.stderr and "removed" in result.stderr
    assert not (project_dir / "runs").exists(), sorted(str(p) for p in (project_dir / "runs").rglob("*"))


def test_a_driver_that_dies_after_a_checkpoint_leaves_a_resumable_directory_and_no_lock(project_dir):
    pipeline = _pipeline_with_abort(project_dir, "driver", at_step=2)
    run_dir = project_dir / "run"
    sets = small_sets("trainer.total_steps=3", "trainer.save_freq=1", *FAST)
    result = rlflow("run", pipeline, "--run-dir", str(run_dir), *sets, cwd=project_dir, timeout=600)
    assert result.returncode == 134, result.stderr[-3000:]
    assert f"resumable from step_1: continue with --resume {run_dir}" in result.stderr
    assert checkpoints.latest(run_dir / "checkpoints").name == "step_1"
    claim_run_dir(run_dir).release()  # the lock went with the driver: a resume may take it at once
