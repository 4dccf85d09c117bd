"""separate_async on real Ray through the CLI: overlap, staleness, a worker dying mid-overlap, SIGTERM.

The shipped BIRD pipeline at small sizes with its rollout on a pool of its own (1 CPU), the
actor on another (1 CPU) and the reward worker reserving next to nothing, so the run fits
this 2-core machine.
"""

from __future__ import annotations

import signal
import time

import pytest
from runtime_helpers import REPO, kill_tree, pipeline_with_death, read_jsonl, rlflow, small_sets, start_rlflow

ASYNC = (
    "resources.rollout_pool={type: local, device: cpu, cpus_per_worker: 1}",
    "resources.reward_pool.cpus_per_worker=0.01",
    "stages.generate.on=rollout_pool",
    "trainer.trainer_mode=separate_async",
    "trainer.max_off_policy_threshold=2",
    "trainer.max_off_policy_strategy=wait",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
)


def test_an_async_run_overlaps_stays_within_the_bound_and_survives_a_dead_worker(project_dir):
    marker = pipeline_with_death(project_dir, at_step=3)
    run_dir = project_dir / "run"
    result = rlflow(
        "run",
        "crash.yaml",
        "--run-dir",
        str(run_dir),
        *small_sets(*ASYNC, "trainer.total_steps=4", "trainer.save_freq=2", "trainer.max_restarts=1"),
        cwd=project_dir,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists() and "restart 1 of 1" in result.stderr
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4], "every step logged once"
    assert [m["training/off_policy/trajectory_staleness/max"] for m in metrics] == [0.0, 1.0, 1.0, 1.0]
    trace = read_jsonl(run_dir / "trace.jsonl")
    first = [r for r in trace if r["attempt"] == 0]
    gen2 = next(r for r in first if r["stage"] == "generate" and r["step"] == 2)
    update1 = next(r for r in first if r["stage"] == "update_actor" and r["step"] == 1)
    assert gen2["pid"] != update1["pid"] and gen2["start"] < update1["end"], "step 2 sampled while step 1 trained"
    second = [r for r in trace if r["attempt"] == 1]
    assert second[0]["stage"] == "load_checkpoint"
    assert sorted({r["step"] for r in second if r["stage"] == "update_actor"}) == [3, 4]
    # step 3's batch came from the checkpoint (sampled ahead in attempt 0): attempt 1 samples only step 4's
    assert sorted(r["step"] for r in second if r["stage"] == "generate") == [4]


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143)])
def test_sigterm_mid_overlap_stops_every_process(tmp_path, signum, status):
    import psutil

    run_dir = tmp_path / "run"
    proc = start_rlflow(
        "run",
        str(REPO / "pipelines" / "bird_grpo.yaml"),
        "--run-dir",
        str(run_dir),
        *small_sets(*ASYNC, "trainer.total_steps=6", "trainer.save_freq=2"),
    )
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            if (run_dir / "checkpoints" / "step_2").exists():
                break
            time.sleep(0.2)
        family = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    assert proc.returncode == status, err[-2000:]
    assert "workers and backends were stopped" in err and "Traceback" not in err
    _, alive = psutil.wait_procs(family, timeout=30)
    assert not alive, f"left running: {[p.name() for p in alive]}"
