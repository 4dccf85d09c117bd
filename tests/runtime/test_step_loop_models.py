"""The step loop with models beside the policy, over the in-process executor: a teacher (distillation) on a
pool of its own and colocated, resumed exactly; a reward model scoring the step while the rule scores
validation."""

from __future__ import annotations

import math

import pytest
from runtime_helpers import NOISY, REPO, train_in_process

DISTILL = REPO / "pipelines" / "ranking_distill.yaml"
RM = REPO / "pipelines" / "ranking_rm.yaml"
SETS = [
    "trainer.train_batch_size=4",
    "algorithm.n=4",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=4",
    "data.max_response_length=16",
    "trainer.save_freq=2",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
]

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the runs here are bit-compared


@pytest.mark.parametrize("placement", ["teacher_pool", "actor_pool"])
def test_distillation_two_steps_a_resume_and_two_more_equal_four_straight(tmp_path, placement):
    sets = [*SETS, f"stages.teacher_log_prob.on={placement}"]
    straight = train_in_process(DISTILL, [*sets, "trainer.total_steps=4"], tmp_path / "straight")
    halves = tmp_path / "halves"
    train_in_process(DISTILL, [*sets, "trainer.total_steps=2"], halves)
    ckpt = halves / "checkpoints" / "step_2"
    resumed = train_in_process(DISTILL, [*sets, "trainer.total_steps=4"], halves, resume=ckpt)

    assert [m["step"] for m in straight] == [m["step"] for m in resumed] == [1, 2, 3, 4]
    for before, after in zip(straight, resumed, strict=True):
        same = {k for k in before if not k.startswith(NOISY)}
        assert same == {k for k in after if not k.startswith(NOISY)}
        assert {k: after[k] for k in same} == {k: before[k] for k in same}, before["step"]
    last = straight[-1]
    assert "distillation/loss" in last and math.isfinite(last["distillation/loss"])
    assert straight[0]["distillation/loss"] != last["distillation/loss"]  # the student moves


@pytest.mark.parametrize("placement", ["rm_pool", "actor_pool"])
def test_the_reward_model_scores_training_and_the_rule_scores_validation(tmp_path, placement):
    sets = [
        *SETS,
        f"stages.rm_score.on={placement}",
        "trainer.total_steps=2",
        "trainer.test_freq=2",
        "data.max_val_samples=8",
    ]
    metrics = train_in_process(RM, sets, tmp_path / "run")
    steps = [m for m in metrics if m["step"] > 0]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        assert {"reward_model/score/mean", "reward_model/score/max", "reward_model/score/min"} <= set(m)
        # combine: replace: the step's score is the model's, while the rule's accuracy is still reported
        assert m["critic/score/mean"] == pytest.approx(m["reward_model/score/mean"], abs=1e-5)
    validated = [m for m in metrics if any(k.startswith("val-core/") for k in m)]
    assert validated and not any(k.startswith("val-core/") and "reward_model" in k for k in validated[-1])
