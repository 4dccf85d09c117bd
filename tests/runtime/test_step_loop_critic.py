"""The step loop with a critic (pipelines/ranking_ppo.yaml) over the in-process executor: two steps, a
resume, two more log what four straight steps log, with the critic on a pool of its own and colocated."""

from __future__ import annotations

import math

import pytest
from runtime_helpers import NOISY, REPO, train_in_process

PPO = REPO / "pipelines" / "ranking_ppo.yaml"
SETS = [
    "trainer.train_batch_size=4",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=2",
    "data.max_response_length=16",
    "trainer.save_freq=2",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the runs here are bit-compared


@pytest.mark.parametrize("placement", ["critic_pool", "actor_pool"])
def test_two_steps_a_resume_and_two_more_equal_four_straight(tmp_path, placement):
    pipeline = PPO  # colocated: both critic stages on the actor's pool (the critic's pool is then not started)
    sets = [*SETS, f"stages.values.on={placement}", f"stages.update_critic.on={placement}"]
    straight = train_in_process(pipeline, [*sets, "trainer.total_steps=4"], tmp_path / "straight")
    halves = tmp_path / "halves"
    train_in_process(pipeline, [*sets, "trainer.total_steps=2"], halves)
    ckpt = halves / "checkpoints" / "step_2"
    critic = ckpt / "critic" / "rank_0"
    assert (critic / "model" / "model.safetensors").is_file() and (critic / "trainer.pt").is_file()
    assert (ckpt / "rank_0" / "trainer.pt").is_file()  # the policy's part, at the root
    resumed = train_in_process(pipeline, [*sets, "trainer.total_steps=4"], halves, resume=ckpt)

    assert [m["step"] for m in straight] == [m["step"] for m in resumed] == [1, 2, 3, 4]
    for before, after in zip(straight, resumed, strict=True):
        same = {k for k in before if not k.startswith(NOISY)}
        assert same == {k for k in after if not k.startswith(NOISY)}
        assert {k: after[k] for k in same} == {k: before[k] for k in same}, before["step"]
    last = straight[-1]
    assert {"critic/vf_loss", "critic/vf_clipfrac", "critic/values/mean", "critic/vf_explained_var"} <= set(last)
    assert math.isfinite(last["critic/vf_loss"]) and last["critic/vf_loss"] > 0
    assert straight[0]["critic/values/mean"] != last["critic/values/mean"]  # the critic trains
