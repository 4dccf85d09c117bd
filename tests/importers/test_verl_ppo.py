"""verl's PPO configs as pipelines: the critic's stages and keys, verl's PPO example scripts, what is refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from verl_examples import PPO_SCRIPTS, ppo_overrides

from rlflow.check import load_pipeline
from rlflow.errors import ConfigError
from rlflow.importers.verl_config import read_verl_config
from rlflow.importers.verl_pipeline import convert
from rlflow.schemas.pipeline import Pipeline
from rlflow.schemas.project import load_project_config

DOC = Path(__file__).resolve().parents[2] / "docs" / "verl.md"
PPO = ["algorithm.adv_estimator=gae", "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=/m/policy"]
CRITIC_STAGES = [("values", "compute_values", "actor_pool"), ("update_critic", "update_critic", "actor_pool")]


def converted(*overrides: str):
    return convert(read_verl_config("ppo_trainer", [*PPO, *overrides]))


def steps(pipeline: dict) -> list[tuple[str, str, str]]:
    return [(s["name"], s["uses"], s["on"]) for s in pipeline["stages"]]


def dropped_keys(conversion) -> list[str]:
    return [line.partition(":")[0] for line in conversion.dropped]


def test_gae_brings_the_critics_stages_on_the_actors_pool_in_verls_order():
    """verl 0.9.1 maps Role.Critic to its global pool, the actor's, whatever the config says."""
    conversion = converted("actor_rollout_ref.actor.use_kl_loss=True")
    assert steps(conversion.pipeline) == [
        ("generate", "generate", "actor_pool"),
        ("reward", "reward_function", "reward_pool"),
        ("old_log_prob", "old_log_prob", "actor_pool"),
        ("ref_log_prob", "ref_log_prob", "actor_pool"),
        ("values", "compute_values", "actor_pool"),
        ("advantage", "grpo_advantage", "driver"),
        ("update_critic", "update_critic", "actor_pool"),
        ("update_actor", "update_actor", "actor_pool"),
        ("sync_weights", "sync_weights", "actor_pool"),
    ]
    spec = Pipeline.model_validate(conversion.pipeline)
    assert spec.uses_critic and spec.algorithm.adv_estimator == "gae" and spec.algorithm.lam == 1.0
    assert "critic" not in conversion.pipeline, "verl's critic defaults are rlflow's: nothing to write"


def test_verls_critic_keys_carry_over_where_they_differ_from_what_rlflows_null_gives():
    conversion = converted(
        "critic.model.path=/m/critic",
        "critic.model.tokenizer_path=/m/policy",
        "critic.fsdp.model_dtype=bf16",
        "critic.optim.lr=2e-5",
        "critic.optim.weight_decay=0.01",  # verl's default, set: rlflow's default too, so not written
        "critic.optim.clip_grad=0.5",
        "critic.ppo_mini_batch_size=128",
        "critic.ppo_micro_batch_size=64",  # verl's deprecated global size, over 8 workers
        "critic.ppo_epochs=2",
        "critic.cliprange_value=0.2",
        "critic.loss_agg_mode=seq-mean-token-sum",
        "critic.forward_micro_batch_size_per_gpu=16",
        "algorithm.lam=0.95",
        "algorithm.gamma=0.99",
        "trainer.critic_warmup=3",
        "trainer.n_gpus_per_node=8",
    )
    p = conversion.pipeline
    assert p["critic"] == {
        "model": {"path": "/m/critic", "dtype": "bfloat16"},
        "optim": {"lr": 2e-5},
        "ppo_mini_batch_size": 128,
        "ppo_micro_batch_size_per_gpu": 8,
        "ppo_epochs": 2,
        "cliprange_value": 0.2,
        "loss_agg_mode": "seq-mean-token-sum",
        "grad_clip": 0.5,
    }
    assert (p["algorithm"]["lam"], p["algorithm"]["gamma"], p["trainer"]["critic_warmup"]) == (0.95, 0.99, 3)
    (values,) = [s for s in p["stages"] if s["uses"] == "compute_values"]
    assert values["with"] == {"micro_batch_size": 16}
    assert conversion.dropped == [], "the tokenizer is the policy's in both"
    assert (
        "critic.ppo_micro_batch_size=64: verl's deprecated global size over 8 workers: "
        "critic.ppo_micro_batch_size_per_gpu 8"
    ) in conversion.changed
    assert "critic" in Pipeline.model_validate(p).model_dump()


def test_a_critic_setting_equal_to_the_actors_is_left_to_rlflows_null():
    """verl's critic defaults follow the actor (ppo_mini_batch_size, ppo_epochs, loss_agg_mode): so do
    rlflow's nulls, so a critic value equal to the actor's is not written."""
    conversion = converted(
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "critic.ppo_micro_batch_size_per_gpu=4",
        "critic.ppo_mini_batch_size=256",
        "critic.model.path=/m/policy",
        "critic.model.use_remove_padding=True",
        "critic.model.enable_gradient_checkpointing=True",
        "critic.forward_micro_batch_size_per_gpu=4",
    )
    assert "critic" not in conversion.pipeline and conversion.listing() == []


def test_what_the_critic_cannot_carry_is_listed_with_why():
    conversion = converted(
        "critic.strategy=fsdp2",
        "critic.fsdp.param_offload=True",
        "critic.ulysses_sequence_parallel_size=2",
        "critic.grad_clip=0.3",
        "critic.use_dynamic_bsz=True",
        "critic.ppo_max_token_len_per_gpu=98304",
        "critic.shuffle=True",
        "critic.data_loader_seed=7",
        "critic.model.enable_gradient_checkpointing=False",
        "critic.model.tokenizer_path=/m/other",
        "critic.model.lora_rank=8",
        "critic.checkpoint.save_contents=[model]",
        "trainer.max_critic_ckpt_to_keep=1",
    )
    why = {line.partition(":")[0]: line.split(": ", 2)[2] for line in conversion.dropped}
    assert sorted(why) == [
        "critic.checkpoint.save_contents",
        "critic.data_loader_seed",
        "critic.fsdp.param_offload",
        "critic.grad_clip",
        "critic.model.enable_gradient_checkpointing",
        "critic.model.lora_rank",
        "critic.model.tokenizer_path",
        "critic.ppo_max_token_len_per_gpu",
        "critic.shuffle",
        "critic.strategy",
        "critic.ulysses_sequence_parallel_size",
        "critic.use_dynamic_bsz",
        "trainer.max_critic_ckpt_to_keep",
    ]
    assert why["critic.grad_clip"].startswith("verl 0.9.1 does not read it: its critic clips at critic.optim.clip_grad")
    assert why["critic.model.enable_gradient_checkpointing"].endswith("model.gradient_checkpointing")
    assert why["critic.model.tokenizer_path"] == "the critic reads the policy's tokenizer (model.tokenizer)"
    assert "critic" not in conversion.pipeline, "critic.grad_clip 0.3 is not what verl runs"


def test_token_budget_micro_batches_the_critic_inherits_are_noted():
    conversion = converted("actor_rollout_ref.actor.use_dynamic_bsz=True")
    (line,) = [line for line in conversion.changed if line.startswith("critic.use_dynamic_bsz")]
    assert "rlflow's counts samples" in line and not conversion.dropped


def test_the_critics_model_is_the_policys_unless_set():
    unset = converted()  # verl's critic.model.path default is a path of its own, not the actor's
    assert any(
        line.startswith("critic.model.path=~/models/deepseek-llm-7b-chat: verl's default, not set; the critic starts")
        for line in unset.changed
    )
    assert "critic" not in unset.pipeline
    hub = converted("critic.model.path=Qwen/Qwen2.5-0.5B")
    assert hub.pipeline["critic"] == {"model": {"path": "Qwen/Qwen2.5-0.5B"}}
    notes = [line for line in hub.changed if line.startswith("critic.model.path=")]
    assert len(notes) == 2 and "set critic.model.path to DIR" in notes[0] and "policy's vocabulary" in notes[1]


def test_without_a_critic_its_keys_are_listed_as_verl_ignores_them():
    conversion = convert(
        read_verl_config(
            "ppo_trainer", ["algorithm.adv_estimator=grpo", "critic.optim.lr=3e-5", "critic.fsdp.param_offload=True"]
        )
    )
    assert "critic" not in conversion.pipeline
    assert not {"values", "update_critic"} & {s["name"] for s in conversion.pipeline["stages"]}
    assert conversion.dropped == [
        "critic.fsdp.param_offload: true: no critic is trained (algorithm.adv_estimator is grpo, critic.enable "
        "unset), so verl ignores it too",
        "critic.optim.lr: 3e-05: no critic is trained (algorithm.adv_estimator is grpo, critic.enable unset), "
        "so verl ignores it too",
    ]


def test_critic_enable_trains_one_beside_a_critic_free_estimator():
    grpo = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.name=vllm"]
    conversion = convert(read_verl_config("ppo_trainer", [*grpo, "critic.enable=True"]))
    assert conversion.pipeline["critic"] == {"enable": True}
    assert [s for s in steps(conversion.pipeline) if s[1] in ("compute_values", "update_critic")] == CRITIC_STAGES
    assert Pipeline.model_validate(conversion.pipeline).uses_critic
    off = convert(read_verl_config("ppo_trainer", [*grpo, "critic.enable=False"]))
    assert "critic" not in off.pipeline and off.listing() == [], "false is rlflow's null here: converted"


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        (["critic.enable=False"], "critic.enable", "adv_estimator gae needs a critic"),
        (["trainer.v1.trainer_mode=separate_async"], "trainer.v1.trainer_mode", "does not train a critic yet"),
        (
            [
                "data.train_batch_size=64",
                "actor_rollout_ref.actor.ppo_mini_batch_size=32",
                "critic.ppo_mini_batch_size=128",
            ],
            "critic.ppo_mini_batch_size",
            "verl refuses",
        ),
    ],
)
def test_what_rlflow_cannot_run_with_a_critic_is_refused_naming_the_key(overrides, key, says):
    with pytest.raises(ConfigError) as info:
        converted(*overrides)
    (problem,) = info.value.diagnostics
    assert problem.path == key and says in problem.message and problem.fix


@pytest.mark.parametrize("script", sorted(PPO_SCRIPTS))
def test_verls_ppo_examples_convert_to_pipelines_rlflow_validates(script, tmp_path):
    """Each of verl's examples/ppo_trainer scripts: the critic's stages on the actor's pool, the critic's
    FSDP settings listed as not carried, and `rlflow validate` passes on the file written."""
    conversion = convert(read_verl_config("ppo_trainer", ppo_overrides(script)))
    assert [s for s in steps(conversion.pipeline) if s[1] in ("compute_values", "update_critic")] == CRITIC_STAGES
    assert {"critic.fsdp.param_offload", "critic.fsdp.optimizer_offload"} <= set(dropped_keys(conversion))
    assert all(line.count(": ") >= 2 for line in conversion.dropped), "each key with its value and why"
    (tmp_path / "rlflow.yaml").write_text("vars: {}\n")
    (tmp_path / "p.yaml").write_text(conversion.render("p.yaml"))
    try:
        loaded = load_pipeline(tmp_path / "p.yaml", (), load_project_config(tmp_path), check_paths=False)
    except ConfigError as exc:  # this environment has no vLLM: that, and only that, is refused
        assert [d.message for d in exc.diagnostics] == [
            "engine 'vllm' needs the vllm extra: pip install 'rlflow[vllm]'"
        ]
        sets = ["stages.0.with.engine=torch"]
        loaded = load_pipeline(tmp_path / "p.yaml", sets, load_project_config(tmp_path), check_paths=False)
    assert loaded.warnings == () and loaded.spec.uses_critic


def test_verls_deepseek_ppo_example_in_detail():
    conversion = convert(read_verl_config("ppo_trainer", ppo_overrides("run_deepseek7b_llm.sh")))
    assert conversion.pipeline["critic"] == {"ppo_micro_batch_size_per_gpu": 32}, "the rest follows the actor"
    assert dropped_keys(conversion) == [
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "critic.fsdp.optimizer_offload",
        "critic.fsdp.param_offload",
        "trainer.experiment_name",
        "trainer.logger",
    ]
    gemma = convert(read_verl_config("ppo_trainer", ppo_overrides("run_gemma.sh")))
    assert "critic" not in gemma.pipeline, "its critic micro-batch is the actor's"
    assert "critic.model.enable_gradient_checkpointing" in dropped_keys(gemma), "off for the critic, on for the actor"


def test_the_ppo_example_in_docs_verl_is_what_the_tool_writes():
    blocks = re.findall(r"```(\w*)\n(.*?)```", DOC.read_text(), re.S)
    (shown,) = [text for lang, text in blocks if lang == "yaml" and "uses: compute_values" in text]
    assert shown in convert(read_verl_config("ppo_trainer", ppo_overrides("run_deepseek7b_llm.sh"))).render()
