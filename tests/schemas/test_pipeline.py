"""The pipeline's defaults against verl 0.9.1's, read from the installed verl.

Every default of the pipeline models and of the built-in stage kinds' ``with:`` models is either
mapped to the verl knob it stands for (``VERL_NAMES``) or named as rlflow's own
(``RLFLOW_ONLY``), so a new field cannot slip past. verl's defaults come from its generated
trainer config (``verl/trainer/config/_generated_ppo_trainer.yaml``, what ``main_ppo`` starts
from). The table "Defaults that differ from verl's" in docs/pipeline_format.md must list exactly
the knobs whose defaults differ, with both values, so it cannot go stale.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from rlflow.schemas.pipeline import (
    AlgorithmSpec,
    CpuPool,
    DataSpec,
    FilterGroupsSpec,
    LocalPool,
    ModelSpec,
    OptimSpec,
    Pipeline,
    RemotePool,
    RolloutCorrectionSpec,
    TrainerSpec,
)
from rlflow.stages import STAGE_KINDS

REPO = Path(__file__).resolve().parents[2]
ACTOR, ROLLOUT = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"

VERL_NAMES = {  # rlflow knob -> the verl knob it stands for
    "model.path": "actor_rollout_ref.model.path",
    "model.tokenizer": "data.tokenizer",
    "model.gradient_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "model.use_remove_padding": "actor_rollout_ref.model.use_remove_padding",
    "data.val": "data.val_files",
    "data.max_prompt_length": "data.max_prompt_length",
    "data.max_response_length": "data.max_response_length",
    "data.truncation": "data.truncation",
    "data.shuffle": "data.shuffle",
    "data.max_train_samples": "data.train_max_samples",
    "data.max_val_samples": "data.val_max_samples",
    "algorithm.adv_estimator": "algorithm.adv_estimator",
    "algorithm.n": f"{ROLLOUT}.n",
    **{
        f"algorithm.{name}": f"{ACTOR}.{name}"
        for name in (
            "clip_ratio",
            "clip_ratio_low",
            "clip_ratio_high",
            "clip_ratio_c",
            "loss_agg_mode",
            "entropy_coeff",
            "use_kl_loss",
            "kl_loss_coef",
            "kl_loss_type",
        )
    },
    "algorithm.use_kl_in_reward": "algorithm.use_kl_in_reward",
    "algorithm.kl_coef": "algorithm.kl_ctrl.kl_coef",
    "algorithm.kl_penalty": "algorithm.kl_penalty",
    "algorithm.norm_adv_by_std_in_grpo": "algorithm.norm_adv_by_std_in_grpo",
    **{
        f"algorithm.rollout_correction.{k}": f"algorithm.rollout_correction.{k}"
        for k in RolloutCorrectionSpec.model_fields
    },
    "algorithm.gamma": "algorithm.gamma",
    "algorithm.lam": "algorithm.lam",
    "stages.compute_values.with.micro_batch_size": "critic.forward_micro_batch_size_per_gpu",
    **{
        f"algorithm.filter_groups.{name}": f"algorithm.filter_groups.{name}"
        for name in ("enable", "metric", "max_num_gen_batches", "max_inflight_gen_batches")
    },
    "algorithm.loss_mode": f"{ACTOR}.policy_loss.loss_mode",
    **{
        f"algorithm.{name}": f"{ACTOR}.policy_loss.{name}"
        for name in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef", "dro_beta")
    },
    "algorithm.tau_pos": f"{ACTOR}.tau_pos",
    "algorithm.tau_neg": f"{ACTOR}.tau_neg",
    "trainer.train_batch_size": "data.train_batch_size",
    "trainer.ppo_mini_batch_size": f"{ACTOR}.ppo_mini_batch_size",
    "trainer.ppo_micro_batch_size_per_gpu": f"{ACTOR}.ppo_micro_batch_size_per_gpu",
    "trainer.log_prob_micro_batch_size_per_gpu": f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu",
    "trainer.use_dynamic_bsz": f"{ACTOR}.use_dynamic_bsz",
    "trainer.ppo_max_token_len_per_gpu": f"{ACTOR}.ppo_max_token_len_per_gpu",
    "trainer.log_prob_use_dynamic_bsz": f"{ROLLOUT}.log_prob_use_dynamic_bsz",
    "trainer.log_prob_max_token_len_per_gpu": f"{ROLLOUT}.log_prob_max_token_len_per_gpu",
    "trainer.ppo_epochs": f"{ACTOR}.ppo_epochs",
    "trainer.total_steps": "trainer.total_training_steps",
    "trainer.total_epochs": "trainer.total_epochs",
    "trainer.save_freq": "trainer.save_freq",
    "trainer.test_freq": "trainer.test_freq",
    "trainer.val_before_train": "trainer.val_before_train",
    "trainer.seed": "data.seed",
    "trainer.grad_clip": f"{ACTOR}.grad_clip",
    "trainer.critic_warmup": "trainer.critic_warmup",
    "trainer.balance_batch": "trainer.balance_batch",
    "trainer.keep_checkpoints": "trainer.max_actor_ckpt_to_keep",
    "trainer.trainer_mode": "trainer.v1.trainer_mode",
    "trainer.max_off_policy_threshold": "trainer.v1.sampler.max_off_policy_threshold",
    "trainer.max_off_policy_strategy": "trainer.v1.sampler.max_off_policy_strategy",
    "trainer.num_warmup_batches": "trainer.v1.separate_async.num_warmup_batches",
    "trainer.optim.name": f"{ACTOR}.optim.optimizer",
    "trainer.optim.lr": f"{ACTOR}.optim.lr",
    "trainer.optim.weight_decay": f"{ACTOR}.optim.weight_decay",
    "trainer.optim.betas": f"{ACTOR}.optim.betas",
    "trainer.optim.lr_warmup_steps": f"{ACTOR}.optim.lr_warmup_steps",
    "trainer.optim.lr_scheduler": f"{ACTOR}.optim.lr_scheduler_type",
    "trainer.optim.min_lr_ratio": f"{ACTOR}.optim.min_lr_ratio",
    "resources.<local>.device": "trainer.device",
    "resources.<local>.gpus_per_node": "trainer.n_gpus_per_node",
    "resources.<local>.nnodes": "trainer.nnodes",
    **{
        f"stages.generate.with.{k}": f"{ROLLOUT}.{k}"
        for k in ("temperature", "top_p", "top_k", "do_sample", "max_num_seqs")
    },
    **{
        f"stages.validate.with.{k}": f"{ROLLOUT}.val_kwargs.{k}"
        for k in ("do_sample", "temperature", "top_p", "top_k", "n")
    },
}

RLFLOW_ONLY = {  # knobs (or whole sections, ending in *) verl has no counterpart for
    "algorithm.gdpo_reward_keys": "verl's AlgoConfig field, absent from its YAML (+algorithm.gdpo_reward_keys)",
    "algorithm.gdpo_reward_weights": "verl's AlgoConfig field, absent from its YAML",
    "description": "free text",
    "model.dtype": "the policy's dtype; verl sets precision per engine (fsdp mixed_precision)",
    "data.format": "rlflow reads text-to-SQL records as well as verl's parquet rows",
    "data.databases": "text-to-SQL only",
    "data.root": "the folder data paths may not escape",
    "data.prompt_template": "text-to-SQL only",
    "trainer.max_restarts": "rlflow's fault policy",
    "trainer.stage_timeout_s": "rlflow's watchdog",
    "resources.<local>.cpus_per_worker": "Ray CPUs and torch threads per worker",
    "resources.<cpu>.*": "rlflow's CPU pools",
    "resources.<remote>.*": "the forwarders of a remote backend",
    "stages.generate.with.engine": "the rollout engine of a local pool (verl's rollout.name has no default)",
    "stages.generate.with.n": "a per-stage override of algorithm.n",
    "stages.old_log_prob.with.*": "per-stage engine and micro-batch (verl's are trainer-wide: log_prob_micro_batch_size_per_gpu)",
    "stages.ref_log_prob.with.*": "as old_log_prob",
    "stages.update_actor.with.*": "the training engine of a local pool",
    "stages.text2sql_reward.with.*": "rlflow's text-to-SQL reward",
    "stages.reward_function.with.*": "verl's custom_reward_function, with rlflow's limits",
    "stages.judge_score.with.*": "the judging template and verdict parser (verl's genrm has them in its reward loop)",
    "stages.group_filter.with.*": "rlflow's group filter",
}


def same_meaning(rlflow_name: str, value, verl_config: dict):
    """verl's default in rlflow's spelling, where the two spell one setting differently."""
    if rlflow_name in ("data.max_train_samples", "data.max_val_samples") and value == -1:
        return None  # -1: every row
    if rlflow_name == "trainer.optim.lr_warmup_steps" and value == -1:
        ratio = lookup(verl_config, f"{ACTOR}.optim.lr_warmup_steps_ratio")
        return value if ratio else 0  # -1: take lr_warmup_steps_ratio of the steps; 0.0 is no warmup
    if rlflow_name == "trainer.optim.name":
        return value.lower()  # verl names the torch.optim class
    if rlflow_name == "trainer.optim.betas":
        return tuple(value)
    if isinstance(value, str) and value.startswith("${oc.select:actor_rollout_ref.actor."):
        return None  # verl interpolates the actor's setting; rlflow's null takes it the same way
    if isinstance(value, str) and value.startswith("${oc.select:.") and value.endswith(",null}"):
        return None  # verl takes a sibling key's value, null by default; rlflow's null falls back alike
    return value


def lookup(config: dict, dotted: str):
    for key in dotted.split("."):
        config = config[key]
    return config


def rlflow_defaults() -> dict:
    """Every rlflow knob that has a default, by its dotted name."""
    sections: list[tuple[str, type[BaseModel]]] = [
        ("", Pipeline),
        ("model.", ModelSpec),
        ("data.", DataSpec),
        ("algorithm.", AlgorithmSpec),
        ("algorithm.rollout_correction.", RolloutCorrectionSpec),
        ("algorithm.filter_groups.", FilterGroupsSpec),
        ("trainer.", TrainerSpec),
        ("trainer.optim.", OptimSpec),
        ("resources.<local>.", LocalPool),
        ("resources.<cpu>.", CpuPool),
        ("resources.<remote>.", RemotePool),
    ]
    sections += [
        (f"stages.{name}.with.", STAGE_KINDS.get(name).config_model)
        for name in STAGE_KINDS.names()
        if STAGE_KINDS.get(name).__module__.startswith("rlflow.stages.")  # built-in kinds, not test plugins
    ]
    out = {}
    for prefix, model in sections:
        for name, field in model.model_fields.items():
            default = field.get_default(call_default_factory=True)
            if default is PydanticUndefined or isinstance(default, BaseModel) or name == "type":
                continue  # required, or a section of its own
            if isinstance(default, dict):
                continue  # a mapping of named entries (resources) or free config
            out[prefix + name] = default
    return out


@pytest.fixture(scope="module")
def verl_config() -> dict:
    import verl
    import yaml

    path = Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    return yaml.safe_load(path.read_text())


def differing(verl_config: dict) -> dict[str, tuple]:
    """rlflow name -> (rlflow default, verl name, verl default) for every mapped knob whose default differs."""
    out = {}
    for name, ours in rlflow_defaults().items():
        if name in VERL_NAMES:
            theirs = lookup(verl_config, VERL_NAMES[name])
            if same_meaning(name, theirs, verl_config) != ours:
                out[name] = (ours, VERL_NAMES[name], theirs)
    return out


def is_rlflow_only(name: str) -> bool:
    return name in RLFLOW_ONLY or any(k.endswith("*") and name.startswith(k[:-1]) for k in RLFLOW_ONLY)


def test_every_default_is_mapped_to_verl_or_named_as_rlflows_own(verl_config):
    names = set(rlflow_defaults())
    unaccounted = sorted(n for n in names if n not in VERL_NAMES and not is_rlflow_only(n))
    assert not unaccounted, f"map these to verl's knob in VERL_NAMES, or add them to RLFLOW_ONLY: {unaccounted}"
    assert not set(VERL_NAMES) - names, "VERL_NAMES names a knob rlflow no longer has"
    for name in VERL_NAMES.values():
        lookup(verl_config, name)  # KeyError: verl has no such knob


def yaml_text(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def docs_table() -> dict[str, list[str]]:
    """The rows of the docs' "Defaults that differ from verl's" table: rlflow name -> its cells."""
    text = (REPO / "docs" / "pipeline_format.md").read_text()
    section = text.split("## Defaults that differ from verl's", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| `")]
    return {re.sub(r"`", "", row[0].strip()): [re.sub(r"`", "", c.strip()) for c in row[1:]] for row in rows}


def test_the_docs_table_lists_exactly_the_defaults_that_differ(verl_config):
    differ = differing(verl_config)
    table = docs_table()
    assert sorted(table) == sorted(differ), "docs/pipeline_format.md: Defaults that differ from verl's"
    for name, (ours, verl_name, theirs) in differ.items():
        assert table[name][:3] == [yaml_text(ours), verl_name, yaml_text(theirs)], name
        assert table[name][3], f"{name}: say why it differs"


@pytest.mark.parametrize(
    "name",
    ["data.truncation", "trainer.total_epochs", "stages.validate.with.temperature", "stages.validate.with.top_k"],
)
def test_defaults_taken_from_verl(verl_config, name):
    assert name not in differing(verl_config)
