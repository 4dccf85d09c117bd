"""No silent hangs: a hung stage ends the run with an error naming the stage, resource and worker."""

from __future__ import annotations

import time

from runtime_helpers import REPO, rlflow, small_sets


def test_hung_stage_is_stopped_by_its_watchdog(project_dir):
    text = (REPO / "pipelines" / "bird_grpo.yaml").read_text()
    text += "  - {name: stuck, uses: test_hang, on: reward_pool, timeout_s: 5}\n"
    (project_dir / "hang.yaml").write_text(text)
    start = time.time()
    result = rlflow(
        "run",
        "hang.yaml",
        "--run-dir",
        str(project_dir / "run"),
        *small_sets("trainer.total_steps=2", "trainer.val_before_train=false"),
        cwd=project_dir,
        timeout=300,
    )
    elapsed = time.time() - start
    assert result.returncode == 1, result.stderr[-2000:]
    assert "stage 'stuck'" in result.stderr and "'reward_pool'" in result.stderr and "worker 0 (pid" in result.stderr
    assert "within 5 s" in result.stderr and "Traceback" not in result.stderr
    assert elapsed < 120, f"the run took {elapsed:.0f} s to notice a 5 s watchdog"


def test_a_pool_the_cluster_cannot_hold_fails_within_seconds_naming_the_shortfall(project_dir):
    start = time.time()
    result = rlflow(
        "run",
        str(REPO / "pipelines" / "bird_grpo.yaml"),
        "--run-dir",
        str(project_dir / "run"),
        *small_sets("resources.actor_pool.device=gpu", "resources.actor_pool.gpus_per_node=2"),
        cwd=project_dir,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "pool actor_pool wants 2 GPUs on each of 1 node(s)" in result.stderr and "Traceback" not in result.stderr
    assert time.time() - start < 90
