"""The shipped pipelines with a model beside the policy, on real Ray through the CLI: three steps of each with
the extra model on a pool of its own (one colocated too), and a dying reward-model pool restarting."""

from __future__ import annotations

import shutil

import pytest
from runtime_helpers import REPO, as_args, read_jsonl, rlflow

from rlflow.assets import ASSETS

SMALL = [
    "trainer.train_batch_size=4",
    "algorithm.n=4",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=4",
    "data.max_response_length=16",
    "data.max_val_samples=8",
    "trainer.total_steps=3",
    "trainer.test_freq=3",
    "trainer.save_freq=-1",
]
CASES = {  # pipeline, the extra model's stage, the metric it must add to every step
    "rm": ("ranking_rm.yaml", "rm_score", "reward_model/score/mean"),
    "judge": ("ranking_judge.yaml", "judge", "reward_model/parse_error_ratio"),
    "distill": ("ranking_distill.yaml", "teacher_log_prob", "distillation/loss"),
}


def _run(tmp_path, pipeline: str, *sets: str):
    run_dir = tmp_path / "run"
    result = rlflow("run", f"pipelines/{pipeline}", "--run-dir", str(run_dir), *as_args([*SMALL, *sets]), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "trace.jsonl")


@pytest.mark.parametrize("case", sorted(CASES))
def test_three_steps_with_the_extra_model_on_a_pool_of_its_own(tmp_path, case):
    pipeline, stage, metric = CASES[case]
    metrics, trace = _run(tmp_path, pipeline)
    steps = [m for m in metrics if m["step"] > 0]
    assert [m["step"] for m in steps] == [1, 2, 3]
    assert all(metric in m for m in steps), sorted(steps[-1])
    own = {r["resource"] for r in trace if r["stage"] == stage}
    actor = {r["resource"] for r in trace if r["stage"] == "update_actor"}
    assert len(own) == 1 and own != actor
    assert any(k.startswith("val-core/") for k in metrics[-1])  # validated by the rule at the end


def test_a_colocated_reward_model_shares_the_actors_worker(tmp_path):
    metrics, trace = _run(tmp_path, "ranking_rm.yaml", "stages.rm_score.on=actor_pool")
    assert [m["step"] for m in metrics if m["step"] > 0] == [1, 2, 3]
    pids = {(r["stage"], r["pid"]) for r in trace if r["stage"] in ("rm_score", "update_actor")}
    assert len({pid for _, pid in pids}) == 1, pids  # one worker holds both models


def test_a_dead_reward_model_worker_restarts_from_the_checkpoint(tmp_path):
    for name in ("ranking_grpo.yaml", "ranking_rm.yaml"):  # ranking_rm builds on ranking_grpo (base:)
        shutil.copy(REPO / "pipelines" / name, tmp_path)
    (tmp_path / "rlflow.yaml").write_text(
        f"vars: {{rank_model_path: '{ASSETS / 'models' / 'tiny-rank-warm'}', rank_root: '{ASSETS / 'data' / 'ranking'}'}}\n"
        "plugins: [rlflow_test_faults]\n"
    )
    marker = tmp_path / "died.marker"
    with (tmp_path / "ranking_rm.yaml").open("a") as text:
        text.write(f"  - {{name: crash, uses: test_die_once, on: rm_pool, with: {{marker: '{marker}', at_step: 3}}}}\n")
    run_dir = tmp_path / "run"
    sets = [
        *SMALL,
        f"stages.reward.with.function={REPO / 'examples' / 'ranking' / 'reward.py'}:compute_score",
        "trainer.total_steps=4",
        "trainer.save_freq=2",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.max_restarts=1",
    ]
    result = rlflow("run", "ranking_rm.yaml", "--run-dir", str(run_dir), *as_args(sets), cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists() and "restart 1 of 1" in result.stderr
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]
    trace = read_jsonl(run_dir / "trace.jsonl")
    second = [r for r in trace if r["attempt"] == 1]
    assert sorted({r["step"] for r in second if r["stage"] == "rm_score"}) == [3, 4]
    assert sorted({r["step"] for r in trace if r["stage"] == "rm_score" and r["attempt"] == 0}) == [1, 2, 3]
