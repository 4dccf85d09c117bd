"""A verl config as a pipeline: the step, the knobs, what is listed, and the values rlflow refuses."""

from __future__ import annotations

import pytest

from rlflow.errors import ConfigError
from rlflow.importers.verl_config import read_verl_config
from rlflow.importers.verl_pipeline import VERL_DEFAULT_REWARD, convert
from rlflow.schemas.pipeline import Pipeline
from rlflow.schemas.safe_yaml import parse_yaml

GRPO = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.name=vllm"]


def converted(*overrides: str, config: str = "ppo_trainer"):
    return convert(read_verl_config(config, [*GRPO, *overrides]))


def stages_of(pipeline: dict) -> dict[str, dict]:
    return {s["name"]: s for s in pipeline["stages"]}


def test_verls_defaults_are_written_out_and_nothing_is_listed():
    conversion = converted()
    p = conversion.pipeline
    assert p["algorithm"]["n"] == 1 and p["trainer"]["ppo_mini_batch_size"] == 256, "verl's defaults, not rlflow's"
    assert p["data"]["max_response_length"] == 512 and p["data"]["truncation"] == "error"
    assert p["trainer"]["optim"] == {
        "name": "adamw",
        "lr": 1e-6,
        "weight_decay": 0.01,
        "betas": [0.9, 0.999],
        "lr_warmup_steps": 0,
        "lr_scheduler": "constant",
        "min_lr_ratio": 0.0,
    }
    assert list(stages_of(p)) == [
        "generate",
        "reward",
        "old_log_prob",
        "advantage",
        "update_actor",
        "sync_weights",
    ], "no reference stage without a KL term, no explicit validation without val_kwargs"
    assert stages_of(p)["reward"]["with"] == {"function": VERL_DEFAULT_REWARD, "max_memory_mb": None}
    assert conversion.listing() == [], "untouched defaults are not listed"
    Pipeline.model_validate(p)


def test_a_user_set_key_without_counterpart_is_listed_with_why():
    conversion = converted(
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
        "critic.optim.lr=1e-5",
        "+my.own.key=3",
        "trainer.resume_mode=disable",
    )
    assert conversion.dropped == [
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size: 2: rlflow has no sequence parallelism",
        "critic.optim.lr: 1e-05: no critic is trained (algorithm.adv_estimator is grpo, critic.enable unset), "
        "so verl ignores it too",
        "my.own.key: 3: rlflow has no such setting",
        "trainer.resume_mode: disable: use `rlflow run --resume latest` (rlflow resumes only when asked)",
    ]
    text = conversion.render("p.yaml")
    assert text.splitlines()[1:6] == [
        "# not carried over (no rlflow counterpart):",
        *(f"#   {line}" for line in conversion.dropped),
    ]


def test_kl_brings_the_reference_stage_and_global_sizes_become_per_worker():
    conversion = converted(
        "actor_rollout_ref.actor.use_kl_loss=True",
        "trainer.n_gpus_per_node=4",
        "trainer.nnodes=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size=64",
        "actor_rollout_ref.ref.log_prob_micro_batch_size=32",
    )
    p = conversion.pipeline
    assert p["trainer"]["ppo_micro_batch_size_per_gpu"] == 8
    assert stages_of(p)["ref_log_prob"]["with"] == {
        "micro_batch_size": 4,
        "use_dynamic_bsz": False,
        "max_token_len": 16384,
    }
    assert p["resources"]["actor_pool"] == {"type": "local", "device": "gpu", "gpus_per_node": 4, "nnodes": 2}
    assert (
        "actor_rollout_ref.actor.ppo_micro_batch_size=64: verl's deprecated global size over 8 workers: "
        "trainer.ppo_micro_batch_size_per_gpu 8"
    ) in conversion.changed


def test_a_per_gpu_size_the_user_set_wins_over_a_global_one_left_at_its_default():
    p = converted("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2").pipeline
    assert p["trainer"]["ppo_micro_batch_size_per_gpu"] == 2


def test_val_kwargs_make_the_validation_stage_explicit():
    p = converted(
        "data.val_files=val.parquet",
        "actor_rollout_ref.rollout.val_kwargs.n=4",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        "actor_rollout_ref.rollout.val_kwargs.temperature=0.6",
    ).pipeline
    assert stages_of(p)["validate"] == {
        "name": "validate",
        "uses": "validate",
        "on": "actor_pool",
        "with": {"temperature": 0.6, "top_p": 1.0, "n": 4, "do_sample": True},
    }


def test_a_kl_stage_setting_without_kl_is_listed():
    conversion = converted("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8")
    assert "ref_log_prob" not in stages_of(conversion.pipeline)
    assert conversion.dropped == [
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu: 8: verl's "
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu is rlflow's with.micro_batch_size of the "
        "ref_log_prob stage, which this pipeline does not use"
    ]


def test_a_global_kl_stage_size_without_kl_is_listed_once_as_not_carried_over():
    conversion = converted("actor_rollout_ref.ref.log_prob_micro_batch_size=8")
    key = "actor_rollout_ref.ref.log_prob_micro_batch_size"
    assert not [line for line in conversion.changed if line.startswith(key + "=")], conversion.listing()
    assert [line.partition(":")[0] for line in conversion.dropped] == [key]
    with_kl = converted(f"{key}=8", "actor_rollout_ref.actor.use_kl_loss=True")
    assert [line.partition("=")[0] for line in with_kl.changed] == [key] and with_kl.dropped == []


def test_one_train_file_is_read_and_the_others_are_listed():
    conversion = converted("data.train_files=[a.parquet,b.parquet,c.parquet]")
    assert conversion.pipeline["data"]["train"] == "a.parquet"
    assert conversion.dropped == []
    (line,) = conversion.changed
    assert line.startswith('data.train_files=["a.parquet", "b.parquet", "c.parquet"]: rlflow reads one file per split')


@pytest.mark.parametrize(
    "overrides",
    [
        ["actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1", "trainer.total_training_steps=100"],
        ["data.train_files=[a.parquet,b.parquet]", "data.val_files=[c.parquet,d.parquet]"],
        ["trainer.project_name=my project"],
        ["actor_rollout_ref.actor.ppo_mini_batch_size=80", "data.train_batch_size=1024"],
    ],
)
def test_a_key_is_never_listed_both_converted_and_not_carried_over(overrides):
    conversion = converted(*overrides)
    shown = [line.partition("=")[0] for line in conversion.changed + conversion.notes]
    dropped = [line.partition(":")[0] for line in conversion.dropped]
    assert shown and not set(shown) & set(dropped), conversion.listing()


def test_a_batch_not_a_multiple_of_the_mini_batch_is_noted_as_verl_runs_it():
    """verl's examples/grpo_trainer/run_qwen3-1.7b.sh: 1024 prompts a step, mini-batches of 80."""
    conversion = converted("data.train_batch_size=1024", "actor_rollout_ref.actor.ppo_mini_batch_size=80")
    assert (
        conversion.pipeline["trainer"]["train_batch_size"],
        conversion.pipeline["trainer"]["ppo_mini_batch_size"],
    ) == (
        1024,
        80,
    )
    assert conversion.notes == [
        "actor_rollout_ref.actor.ppo_mini_batch_size=80: data.train_batch_size 1024 is not a multiple, so each "
        "update takes 12 mini-batches of 80 prompts and a last one of 64 (verl pads it with no-op samples)"
    ]
    assert conversion.listing()[0] == "converted, as verl runs it:"
    with pytest.raises(ConfigError) as info:  # verl's ActorConfig.validate refuses a mini-batch over the batch
        converted("data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=32")
    (problem,) = info.value.diagnostics
    assert problem.path == "actor_rollout_ref.actor.ppo_mini_batch_size" and "verl refuses it too" in problem.message


def test_a_custom_reward_function_keeps_verls_path_and_name():
    p = converted("custom_reward_function.path=rewards/mine.py", "custom_reward_function.name=my_score").pipeline
    assert stages_of(p)["reward"]["with"] == {"function": "rewards/mine.py:my_score"}
    newer = converted("reward.custom_reward_function.path=/abs/r.py").pipeline
    assert stages_of(newer)["reward"]["with"] == {"function": "/abs/r.py:compute_score"}, "verl's default name"


def test_unsupported_values_are_errors_naming_each_verl_key_at_once():
    with pytest.raises(ConfigError) as info:
        convert(
            read_verl_config(
                "ppo_trainer",
                [
                    "algorithm.adv_estimator=remax",
                    "actor_rollout_ref.rollout.name=sglang",
                    "actor_rollout_ref.actor.strategy=megatron",
                    "data.truncation=right",
                    "data.max_prompt_length=0",
                    "actor_rollout_ref.rollout.top_p=2",
                ],
            )
        )
    lines = {d.path: str(d) for d in info.value.diagnostics}
    assert len(lines) == len(info.value.diagnostics) == 6
    assert lines["algorithm.adv_estimator"] == (
        "algorithm.adv_estimator: 'remax' (a command-line override): remax needs a greedy baseline rollout scored "
        "by the reward (verl's reward_baselines) in every step, which rlflow's step does not run "
        "(use rloo or grpo, whose baseline is the group's other samples: algorithm.adv_estimator=...)"
    )
    assert lines["data.truncation"].startswith("data.truncation: 'right' (a command-line override): rlflow keeps")
    assert lines["actor_rollout_ref.actor.strategy"].startswith("actor_rollout_ref.actor.strategy: 'megatron' (a ")
    assert lines["actor_rollout_ref.rollout.name"].startswith("actor_rollout_ref.rollout.name: 'sglang' (a ")
    assert lines["actor_rollout_ref.rollout.top_p"] == (
        "actor_rollout_ref.rollout.top_p: 2 (a command-line override): rlflow's with.top_p of the generate stage "
        "should be less than or equal to 1"
    )
    assert lines["data.max_prompt_length"] == (
        "data.max_prompt_length: 0 (a command-line override): rlflow's data.max_prompt_length should be greater than 0"
    )


def test_a_reward_model_without_its_model_path_is_refused():
    """A reward model is carried (tests/importers/test_import_verl_models.py), but not one without a model."""
    with pytest.raises(ConfigError) as info:
        converted("reward.reward_model.enable=True")
    assert str(info.value).startswith(
        "reward.reward_model.enable: True (a command-line override): verl's reward model needs its model_path"
    )


def test_a_value_jinja_would_read_is_refused():
    with pytest.raises(ConfigError) as info:
        converted("data.train_files='{{ root }}/a.parquet'")
    assert str(info.value).startswith("data.train_files: '{{ root }}/a.parquet' (a command-line override): ")


def test_the_file_is_the_pipeline_under_its_comments():
    conversion = converted("+my.weird='{{x}}'", "trainer.project_name='my project!'")
    text = conversion.render("out.yaml")
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments[0] == (
        "# Imported from verl's ppo_trainer by `rlflow import-verl`; check it with `rlflow validate out.yaml`."
    )
    assert "# not carried over (no rlflow counterpart):" in comments
    assert not any("{{" in line for line in comments), "the comments cannot be read as a template"
    assert (
        "    - {name: generate, uses: generate, on: actor_pool" not in text
        and "  - {name: generate, uses: generate, on: actor_pool" in text
    )
    data, _, problems = parse_yaml(text, "out.yaml")  # rlflow's reader: YAML 1.2, `on` is a plain key
    assert problems == [] and data == conversion.pipeline
    assert conversion.pipeline["name"] == "my-project"


def test_rollout_correction_carries_over_with_verls_keys():
    rc = "algorithm.rollout_correction"
    p = converted(f"{rc}.rollout_is=sequence", f"{rc}.rollout_is_threshold=3.0", f"{rc}.bypass_mode=true").pipeline
    assert p["algorithm"]["rollout_correction"] == {
        "rollout_is": "sequence",
        "rollout_is_threshold": 3.0,
        "rollout_is_batch_normalize": False,
        "bypass_mode": True,
        "loss_type": "ppo_clip",
    }, "null keys are left to rlflow's default, null too"
    assert Pipeline.model_validate(p).algorithm.rollout_correction.bypass_mode
    with pytest.raises(ConfigError) as refused:
        converted(f"{rc}.rollout_rs=token_k9", f"{rc}.rollout_rs_threshold=2.0")
    assert "algorithm.rollout_correction" in str(refused.value) and "token_k9" in str(refused.value)


def test_verls_separate_async_trainer_gets_a_rollout_pool_and_its_sampler_knobs():
    conversion = converted(
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.sampler.max_off_policy_threshold=2",
        "trainer.v1.sampler.max_off_policy_strategy=wait",
        "trainer.v1.separate_async.num_warmup_batches=1",
        "trainer.v1.separate_async.parameter_sync_step=2",
        "actor_rollout_ref.rollout.n_gpus_per_node=2",
    )
    p = conversion.pipeline
    assert {k: p["trainer"][k] for k in ("trainer_mode", "max_off_policy_threshold", "max_off_policy_strategy")} == {
        "trainer_mode": "separate_async",
        "max_off_policy_threshold": 2,
        "max_off_policy_strategy": "wait",
    }
    assert stages_of(p)["generate"]["on"] == "rollout_pool" and stages_of(p)["update_actor"]["on"] == "actor_pool"
    assert p["resources"]["rollout_pool"] == {"type": "local", "device": "gpu", "gpus_per_node": 2}
    assert any("parameter_sync_step" in line and "no counterpart" in line for line in conversion.dropped)
    assert any("rollout_pool" in line for line in conversion.changed)
    Pipeline.model_validate(p)


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("trainer.v1.trainer_mode=colocate_async", "separate_async"),
        ("trainer.v1.separate_async.num_warmup_batches=1.5", "whole batches"),
    ],
)
def test_what_rlflows_async_mode_cannot_carry_is_refused_with_the_fix(override, says):
    with pytest.raises(ConfigError) as err:
        converted(override)
    assert says in str(err.value)


def test_an_enabled_multi_turn_block_becomes_the_generate_stages_with_multi_turn():
    mt = "actor_rollout_ref.rollout.multi_turn"
    conversion = converted(
        f"{mt}.enable=true",
        f"{mt}.max_assistant_turns=3",
        f"{mt}.tool_config_path=tools/tools.yaml",
        f"{mt}.tokenization_sanity_check_mode=disable",
    )
    block = stages_of(conversion.pipeline)["generate"]["with"]["multi_turn"]
    assert block["enable"] is True and block["max_assistant_turns"] == 3
    assert block["tool_config_path"] == "tools/tools.yaml" and block["format"] == "hermes"
    assert "max_user_turns" not in block  # verl's null: rlflow's default, no limit
    assert any("tool_config_path=tools/tools.yaml" in line and "project root" in line for line in conversion.changed)
    (ignored,) = [line for line in conversion.dropped if "tokenization_sanity_check_mode" in line]
    assert "verl's agent loop ignores it" in ignored and "tokenization_sanity_check_mode" not in block
    Pipeline.model_validate(conversion.pipeline)
    off = converted(f"{mt}.max_assistant_turns=3")  # verl ignores the block while enable is false
    assert "multi_turn" not in stages_of(off.pipeline)["generate"].get("with", {}) and not off.dropped
