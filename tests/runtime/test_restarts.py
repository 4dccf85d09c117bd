"""A dead worker: the run fails fast naming it, or restarts from the last checkpoint losing and repeating no step."""

from __future__ import annotations

from runtime_helpers import pipeline_with_death, read_jsonl, rlflow, small_sets


def test_dead_worker_fails_fast_with_the_cause(project_dir):
    marker = pipeline_with_death(project_dir, at_step=1)
    result = rlflow(
        "run",
        "crash.yaml",
        "--run-dir",
        str(project_dir / "run"),
        *small_sets("trainer.total_steps=2", "trainer.val_before_train=false"),
        cwd=project_dir,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert marker.exists()
    assert "stage 'crash'" in result.stderr and "of resource 'reward_pool' died" in result.stderr
    assert "Traceback" not in result.stderr


def test_dead_worker_restarts_and_resumes_without_losing_or_repeating_a_step(project_dir):
    pipeline_with_death(project_dir, at_step=3)
    run_dir = project_dir / "run"
    result = rlflow(
        "run",
        "crash.yaml",
        "--run-dir",
        str(run_dir),
        *small_sets(
            "trainer.total_steps=4",
            "trainer.save_freq=2",
            "trainer.max_restarts=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
        ),
        cwd=project_dir,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "restart 1 of 1" in result.stderr
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]
    trace = read_jsonl(run_dir / "trace.jsonl")
    first, second = [r for r in trace if r["attempt"] == 0], [r for r in trace if r["attempt"] == 1]
    assert max(r["step"] for r in first) == 3, "the first attempt died in step 3"
    assert second[0]["stage"] == "load_checkpoint", "the second attempt starts from the checkpoint"
    assert sorted({r["step"] for r in second if r["stage"] == "update_actor"}) == [3, 4]
    assert sorted({r["step"] for r in first if r["stage"] == "update_actor"}) == [1, 2], "step 3 never finished"
