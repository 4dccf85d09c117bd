"""A dead worker: the run fails fast naming it, or restarts from the last checkpoint losing and repeating no step
(a critic on a pool of its own included)."""

from __future__ import annotations

import shutil

from runtime_helpers import REPO, as_args, pipeline_with_death, read_jsonl, rlflow, small_sets

from rlflow.assets import ASSETS


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


def test_a_dead_critic_worker_restarts_both_models_from_the_checkpoint(tmp_path):
    """PPO with the critic on a pool of its own: the critic's worker dies in step 3; the restart loads the
    checkpoint on both pools (the policy's part and the critic's) and trains steps 3 and 4 once each."""
    for name in ("ranking_grpo.yaml", "ranking_ppo.yaml"):
        shutil.copy(REPO / "pipelines" / name, tmp_path)
    (tmp_path / "rlflow.yaml").write_text(
        f"vars: {{rank_model_path: '{ASSETS / 'models' / 'tiny-rank-warm'}', rank_root: '{ASSETS / 'data' / 'ranking'}'}}\n"
        "plugins: [rlflow_test_faults]\n"
    )
    marker = tmp_path / "died.marker"
    with (tmp_path / "ranking_ppo.yaml").open("a") as text:
        text.write(
            f"  - {{name: crash, uses: test_die_once, on: critic_pool, with: {{marker: '{marker}', at_step: 3}}}}\n"
        )
    run_dir = tmp_path / "run"
    result = rlflow(
        "run",
        "ranking_ppo.yaml",
        "--run-dir",
        str(run_dir),
        *as_args(PPO_SMALL),
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists() and "restart 1 of 1" in result.stderr
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]
    trace = read_jsonl(run_dir / "trace.jsonl")
    second = [r for r in trace if r["attempt"] == 1]
    assert {r["resource"] for r in second if r["stage"] == "load_checkpoint"} == {"actor_pool", "critic_pool"}
    assert sorted({r["step"] for r in second if r["stage"] == "update_critic"}) == [3, 4]
    assert sorted({r["step"] for r in trace if r["stage"] == "update_critic" and r["attempt"] == 0}) == [1, 2]


PPO_SMALL = [
    "trainer.train_batch_size=4",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=2",
    f"stages.reward.with.function={REPO / 'examples' / 'ranking' / 'reward.py'}:compute_score",
    "trainer.total_steps=4",
    "trainer.save_freq=2",
    "trainer.max_restarts=1",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
]
