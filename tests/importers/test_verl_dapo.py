"""DAPO's keys from verl's DAPO recipe (its scripts and its config) carry over: clip-higher, token-mean,
dynamic sampling, the overlong buffer, and the GRPO family's estimator and loss names."""

from __future__ import annotations

import pytest

from rlflow.errors import ConfigError
from rlflow.importers.verl_config import read_verl_config
from rlflow.importers.verl_pipeline import convert
from rlflow.schemas.pipeline import Pipeline

BASE = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.name=vllm", "data.max_response_length=2048"]
# as verl's DAPO recipe scripts write them (run_dapo_qwen2.5_32b.sh and its siblings)
SCRIPT = [
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.clip_ratio_c=10.0",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean",
    "algorithm.filter_groups.enable=True",
    "algorithm.filter_groups.max_num_gen_batches=10",
    "algorithm.filter_groups.metric=acc",
    "+data.gen_batch_size=48",
    "reward_model.reward_manager=dapo",
    "+reward_model.overlong_buffer.enable=True",
    "+reward_model.overlong_buffer.len=512",
    "+reward_model.overlong_buffer.penalty_factor=1.0",
    "+reward_model.reward_kwargs.max_resp_len=2048",
]


def reward_stage(pipeline: dict) -> dict:
    return next(s for s in pipeline["stages"] if s["uses"] == "reward_function")


def test_the_recipe_scripts_keys_carry_over():
    out = convert(read_verl_config("ppo_trainer", [*BASE, *SCRIPT]))
    algorithm = out.pipeline["algorithm"]
    assert (algorithm["clip_ratio_low"], algorithm["clip_ratio_high"], algorithm["clip_ratio_c"]) == (0.2, 0.28, 10.0)
    assert algorithm["loss_agg_mode"] == "token-mean"
    assert algorithm["filter_groups"] == {
        "enable": True,
        "metric": "acc",
        "max_num_gen_batches": 10,
        "max_inflight_gen_batches": 1,
    }
    assert reward_stage(out.pipeline)["with"]["overlong_buffer"] == {"enable": True, "len": 512, "penalty_factor": 1.0}
    dropped = {line.split(":")[0] for line in out.dropped}
    assert dropped == {"data.gen_batch_size", "reward_model.reward_kwargs.max_resp_len", "reward_model.reward_manager"}
    Pipeline.model_validate(out.pipeline)


def test_the_recipe_configs_spelling_carries_over():
    overrides = [
        "+reward.reward_kwargs.overlong_buffer_cfg.enable=True",
        "+reward.reward_kwargs.overlong_buffer_cfg.len=256",
        "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
        "+reward.reward_kwargs.overlong_buffer_cfg.log=True",
    ]
    out = convert(read_verl_config("ppo_trainer", [*BASE, *overrides]))
    buffer = reward_stage(out.pipeline)["with"]["overlong_buffer"]
    assert buffer == {"enable": True, "len": 256, "penalty_factor": 0.5, "log": True}


def test_estimator_and_loss_names_carry_over():
    overrides = [
        "algorithm.adv_estimator=rloo",
        "actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.001",
        "algorithm.norm_adv_by_std_in_grpo=False",
    ]
    algorithm = convert(read_verl_config("ppo_trainer", [*BASE, *overrides])).pipeline["algorithm"]
    assert (algorithm["adv_estimator"], algorithm["loss_mode"], algorithm["clip_cov_ratio"]) == (
        "rloo",
        "clip_cov",
        0.001,
    )


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("algorithm.adv_estimator=remax", "algorithm.adv_estimator"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode", "actor_rollout_ref.actor.policy_loss.loss_mode"),
    ],
)
def test_a_name_rlflow_cannot_run_is_refused_naming_the_verl_key(override, key):
    with pytest.raises(ConfigError) as info:
        convert(read_verl_config("ppo_trainer", [*BASE, override]))
    (problem,) = info.value.diagnostics
    assert problem.path == key and "needs" in problem.message


def test_verls_bypass_loss_carries_over_beside_bypass_mode():
    overrides = [
        "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode",
        "algorithm.rollout_correction.bypass_mode=true",
    ]
    conversion = convert(read_verl_config("ppo_trainer", [*BASE, *overrides]))
    algorithm = conversion.pipeline["algorithm"]
    assert algorithm["loss_mode"] == "bypass_mode" and algorithm["rollout_correction"]["bypass_mode"] is True
    assert any(line.startswith("actor_rollout_ref.actor.policy_loss.loss_mode=") for line in conversion.changed)
    with pytest.raises(ConfigError) as info:  # alone it still points to the key that makes it run
        convert(read_verl_config("ppo_trainer", [*BASE, overrides[0]]))
    (problem,) = info.value.diagnostics
    assert "set algorithm.rollout_correction.bypass_mode: true" in problem.fix
