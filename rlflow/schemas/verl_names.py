"""verl's config keys and where each lives in rlflow: one table for ``rlflow import-verl`` and for errors.

Design notes: docs/design/schemas.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Place = Literal["field", "stage", "pool", "project", "command"]

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
OPTIM = "actor_rollout_ref.actor.optim"
CRITIC = "critic"
RM = "reward.reward_model"
LEGACY_RM = "reward_model"  # verl's legacy top-level spelling, migrated over RM when not null
DISTILL = "distillation"
TEACHER = "distillation.teacher_models.<name>"  # <name>: any teacher's name (see why_not)


@dataclass(frozen=True)
class VerlName:
    """One verl key and rlflow's counterpart.

    ``rlflow`` is a dotted pipeline path (place ``field``), a key under the ``with:`` of the stage
    kind ``owner`` (``stage``), a key of the pool of type ``owner`` (``pool``), a key of rlflow.yaml
    (``project``) or a command line (``command``).
    """

    verl: str
    rlflow: str
    place: Place = "field"
    owner: str = ""
    note: str = ""
    global_size: bool = False

    @property
    def where(self) -> str:
        """rlflow's name in words: ``trainer.optim.lr``, ``with.temperature of the generate stage``, ..."""
        if self.place == "stage":
            return f"with.{self.rlflow} of the {self.owner} stage"
        if self.place == "pool":
            return f"{self.rlflow} of the {self.owner} pool (resources)"
        if self.place == "project":
            return f"{self.rlflow} in rlflow.yaml"
        if self.place == "command":
            return f"`{self.rlflow}`"
        return self.rlflow

    def hint(self) -> str:
        """The sentence an error shows: ``verl's X is rlflow's Y`` (with how they differ, when they do)."""
        if self.global_size:
            leaf = self.verl.rpartition(".")[2]
            return (
                f"verl's {leaf} is a deprecated global size; rlflow's {self.where} is per worker: "
                "verl's global size divided by the number of workers"
            )
        return f"verl's {self.verl} is rlflow's {self.where}" + (f"; {self.note}" if self.note else "")

    def pipeline_path(self, data: Any = None) -> str | None:
        """The dotted path ``--set`` takes for this knob in the pipeline ``data``; None when it is not a
        pipeline field or ``data`` has no stage or pool to hold it."""
        if self.place == "field":
            return self.rlflow
        if self.place == "stage" and isinstance(data, Mapping) and isinstance(data.get("stages"), list):
            for i, stage in enumerate(data["stages"]):
                if isinstance(stage, Mapping) and stage.get("uses") == self.owner:
                    return f"stages.{i}.with.{self.rlflow}"
        if self.place == "pool" and isinstance(data, Mapping) and isinstance(data.get("resources"), Mapping):
            for name, pool in data["resources"].items():
                if isinstance(pool, Mapping) and pool.get("type") == self.owner:
                    return f"resources.{name}.{self.rlflow}"
        return None


def _same(section: str, keys: str, rlflow_section: str, place: Place = "field", owner: str = "") -> list[VerlName]:
    """verl ``section.k`` -> rlflow ``rlflow_section.k`` for each k of ``keys`` (same name both sides)."""
    prefix = f"{rlflow_section}." if rlflow_section else ""
    return [VerlName(f"{section}.{k}", f"{prefix}{k}", place, owner) for k in keys.split()]


VERL_NAMES: tuple[VerlName, ...] = (
    # data
    VerlName("data.train_files", "data.train", note="one file: verl takes a list"),
    VerlName("data.val_files", "data.val", note="one file: verl takes a list"),
    *_same("data", "max_prompt_length max_response_length", "data"),
    VerlName("data.filter_overlong_prompts", "data.truncation", note="true is truncation: drop"),
    VerlName("data.truncation", "data.truncation", note="error and left; verl's right and middle have no counterpart"),
    VerlName("data.shuffle", "data.shuffle"),
    VerlName("data.seed", "trainer.seed", note="rlflow's one seed also seeds sampling"),
    VerlName("data.train_max_samples", "data.max_train_samples", note="-1 (all) is null"),
    VerlName("data.val_max_samples", "data.max_val_samples", note="-1 (all) is null"),
    VerlName("data.train_batch_size", "trainer.train_batch_size"),
    # model
    VerlName("actor_rollout_ref.model.path", "model.path", note="a local directory: rlflow downloads nothing"),
    VerlName("actor_rollout_ref.model.tokenizer_path", "model.tokenizer"),
    VerlName("actor_rollout_ref.model.enable_gradient_checkpointing", "model.gradient_checkpointing"),
    VerlName("actor_rollout_ref.model.use_remove_padding", "model.use_remove_padding"),
    VerlName(f"{ACTOR}.fsdp_config.model_dtype", "model.dtype", note="fp32, bf16, fp16 are float32, bfloat16, float16"),
    # actor: batch sizes, update, loss
    VerlName(f"{ACTOR}.ppo_mini_batch_size", "trainer.ppo_mini_batch_size"),
    VerlName(f"{ACTOR}.ppo_micro_batch_size_per_gpu", "trainer.ppo_micro_batch_size_per_gpu"),
    VerlName(f"{ACTOR}.ppo_micro_batch_size", "trainer.ppo_micro_batch_size_per_gpu", global_size=True),
    *_same(ACTOR, "use_dynamic_bsz ppo_max_token_len_per_gpu", "trainer"),
    VerlName(f"{ACTOR}.ppo_epochs", "trainer.ppo_epochs"),
    VerlName(f"{OPTIM}.clip_grad", "trainer.grad_clip"),
    VerlName(f"{ACTOR}.grad_clip", "trainer.grad_clip"),
    VerlName(f"{OPTIM}.optimizer", "trainer.optim.name", note="AdamW, Adam, SGD are adamw, adam, sgd"),
    *_same(OPTIM, "lr weight_decay betas", "trainer.optim"),
    VerlName(f"{OPTIM}.lr_warmup_steps", "trainer.optim.lr_warmup_steps", note="-1 with no warm-up ratio is 0"),
    VerlName(f"{OPTIM}.lr_scheduler_type", "trainer.optim.lr_scheduler", note="constant or cosine"),
    VerlName(f"{OPTIM}.warmup_style", "trainer.optim.lr_scheduler", note="verl's deprecated lr_scheduler_type"),
    VerlName(f"{OPTIM}.min_lr_ratio", "trainer.optim.min_lr_ratio"),
    *_same(
        ACTOR,
        "clip_ratio clip_ratio_low clip_ratio_high clip_ratio_c loss_agg_mode entropy_coeff "
        "use_kl_loss kl_loss_coef kl_loss_type",
        "algorithm",
    ),
    VerlName(f"{ACTOR}.strategy", "engine", "stage", "update_actor", note="fsdp and fsdp2 are the torch engine"),
    # rollout
    VerlName(f"{ROLLOUT}.n", "algorithm.n"),
    VerlName(f"{ROLLOUT}.name", "engine", "stage", "generate", note="vllm is vllm; no sglang or trtllm rollout"),
    *_same(ROLLOUT, "temperature top_p top_k do_sample max_num_seqs", "", "stage", "generate"),
    *_same(f"{ROLLOUT}.val_kwargs", "temperature top_p n do_sample", "", "stage", "validate"),
    # the rollout's multi_turn block: the same keys under the generate stage's with.multi_turn
    *_same(
        f"{ROLLOUT}.multi_turn",
        "enable max_assistant_turns max_user_turns max_parallel_calls max_tool_response_length "
        "tool_response_truncate_side format",
        "multi_turn",
        "stage",
        "generate",
    ),
    *[
        VerlName(
            f"{ROLLOUT}.multi_turn.{key}", f"multi_turn.{key}", "stage", "generate", note="relative to the project root"
        )
        for key in ("tool_config_path", "function_tool_path")
    ],
    *[
        VerlName(
            f"{ROLLOUT}.multi_turn.{key}",
            f"multi_turn.{key}",
            "stage",
            "generate",
            note="accepted and ignored: verl 0.9.1's agent loop does not read it either",
        )
        for key in ("use_inference_chat_template", "tokenization_sanity_check_mode", "num_repeat_rollouts")
    ],
    VerlName(f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", "trainer.log_prob_micro_batch_size_per_gpu"),
    VerlName(f"{ROLLOUT}.log_prob_micro_batch_size", "trainer.log_prob_micro_batch_size_per_gpu", global_size=True),
    *_same(ROLLOUT, "log_prob_use_dynamic_bsz log_prob_max_token_len_per_gpu", "trainer"),
    VerlName("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", "use_dynamic_bsz", "stage", "ref_log_prob"),
    VerlName("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", "max_token_len", "stage", "ref_log_prob"),
    VerlName("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "micro_batch_size", "stage", "ref_log_prob"),
    VerlName(
        "actor_rollout_ref.ref.log_prob_micro_batch_size", "micro_batch_size", "stage", "ref_log_prob", global_size=True
    ),
    # algorithm
    VerlName("algorithm.adv_estimator", "algorithm.adv_estimator", note="gae trains a critic (docs/algorithms.md)"),
    *_same(
        "algorithm",
        "norm_adv_by_std_in_grpo use_kl_in_reward kl_penalty gamma lam gdpo_reward_keys gdpo_reward_weights",
        "algorithm",
    ),
    *_same(
        "algorithm.filter_groups",
        "enable metric max_num_gen_batches max_inflight_gen_batches",
        "algorithm.filter_groups",
    ),
    VerlName(
        f"{ACTOR}.policy_loss.loss_mode",
        "algorithm.loss_mode",
        note="bypass_mode only with algorithm.rollout_correction.bypass_mode (verl's legacy bypass loss)",
    ),
    *_same(
        f"{ACTOR}.policy_loss",
        "clip_cov_ratio clip_cov_lb clip_cov_ub kl_cov_ratio ppo_kl_coef dro_beta",
        "algorithm",
    ),
    *_same(ACTOR, "tau_pos tau_neg", "algorithm"),
    VerlName("algorithm.kl_ctrl.kl_coef", "algorithm.kl_coef", note="a fixed coefficient, verl's kl_ctrl.type: fixed"),
    *_same(
        "algorithm.rollout_correction",
        "rollout_is rollout_is_threshold rollout_is_batch_normalize rollout_rs rollout_rs_threshold bypass_mode "
        "loss_type",
        "algorithm.rollout_correction",
    ),
    # reward
    VerlName("reward.custom_reward_function.path", "function", "stage", "reward_function", note="path.py:name"),
    VerlName("reward.custom_reward_function.name", "function", "stage", "reward_function", note="path.py:name"),
    VerlName("custom_reward_function.path", "function", "stage", "reward_function", note="path.py:name"),
    VerlName("custom_reward_function.name", "function", "stage", "reward_function", note="path.py:name"),
    *[
        VerlName(
            f"{section}.{key}", f"overlong_buffer.{key}", "stage", "reward_function", note="DAPO's overlong shaping"
        )
        for section in ("reward.reward_kwargs.overlong_buffer_cfg", "reward_model.overlong_buffer")
        for key in ("enable", "len", "penalty_factor", "log")
    ],
    # the critic (adv_estimator gae, or critic.enable): written where it differs from what rlflow's null gives
    VerlName(f"{CRITIC}.enable", "critic.enable", note="null: on for gae, as verl decides"),
    VerlName(
        f"{CRITIC}.model.path", "critic.model.path", note="null: model.path, the policy's, with a fresh value head"
    ),
    VerlName(f"{CRITIC}.fsdp.model_dtype", "critic.model.dtype", note="null: model.dtype"),
    VerlName(f"{CRITIC}.optim.optimizer", "critic.optim.name", note="AdamW, Adam, SGD are adamw, adam, sgd"),
    *_same(f"{CRITIC}.optim", "lr weight_decay betas", "critic.optim"),
    VerlName(f"{CRITIC}.optim.lr_warmup_steps", "critic.optim.lr_warmup_steps", note="-1 with no warm-up ratio is 0"),
    VerlName(f"{CRITIC}.optim.lr_scheduler_type", "critic.optim.lr_scheduler", note="constant or cosine"),
    VerlName(f"{CRITIC}.optim.warmup_style", "critic.optim.lr_scheduler", note="verl's deprecated lr_scheduler_type"),
    VerlName(f"{CRITIC}.optim.min_lr_ratio", "critic.optim.min_lr_ratio"),
    VerlName(f"{CRITIC}.optim.clip_grad", "critic.grad_clip"),
    VerlName(f"{CRITIC}.ppo_mini_batch_size", "critic.ppo_mini_batch_size", note="null: trainer.ppo_mini_batch_size"),
    VerlName(f"{CRITIC}.ppo_micro_batch_size_per_gpu", "critic.ppo_micro_batch_size_per_gpu"),
    VerlName(f"{CRITIC}.ppo_micro_batch_size", "critic.ppo_micro_batch_size_per_gpu", global_size=True),
    VerlName(f"{CRITIC}.ppo_epochs", "critic.ppo_epochs", note="null: trainer.ppo_epochs"),
    VerlName(f"{CRITIC}.cliprange_value", "critic.cliprange_value"),
    VerlName(f"{CRITIC}.loss_agg_mode", "critic.loss_agg_mode", note="null: algorithm.loss_agg_mode"),
    VerlName(f"{CRITIC}.forward_micro_batch_size_per_gpu", "micro_batch_size", "stage", "compute_values"),
    VerlName(f"{CRITIC}.forward_micro_batch_size", "micro_batch_size", "stage", "compute_values", global_size=True),
    # a reward model beside the policy (an rm_score stage): the legacy spelling first, as verl migrates it over
    VerlName(f"{LEGACY_RM}.enable", "reward_model.enable", note="verl's legacy reward.reward_model.enable"),
    VerlName(f"{RM}.enable", "reward_model.enable", note="adds an rm_score stage after generate"),
    *[
        VerlName(
            f"{section}.enable_resource_pool",
            "reward_model.enable_resource_pool",
            note="true: the rm_score stage runs on rm_pool, a pool of its own; false: on the actor's",
        )
        for section in (LEGACY_RM, RM)
    ],
    VerlName(f"{LEGACY_RM}.model.path", "reward_model.model_path", note="verl's legacy reward.reward_model.model_path"),
    VerlName(f"{RM}.model_path", "reward_model.model_path", note="a sequence classifier (verl's disrm)"),
    VerlName(f"{LEGACY_RM}.rollout.dtype", "reward_model.dtype", note="bf16, fp16, fp32 are bfloat16, ..."),
    VerlName(f"{RM}.rollout.dtype", "reward_model.dtype", note="bf16, fp16, fp32 are bfloat16, ..."),
    *_same(f"{RM}.rollout", "temperature top_p top_k", "reward_model.rollout"),
    *_same(f"{LEGACY_RM}.rollout", "prompt_length response_length", "reward_model.rollout"),
    *_same(f"{RM}.rollout", "prompt_length response_length", "reward_model.rollout"),
    *_same(LEGACY_RM, "micro_batch_size_per_gpu max_length", "reward_model"),
    # on-policy distillation (a teacher_log_prob stage after generate); each teacher is
    # distillation.teacher_models.<name>.{key, model_path, inference.dtype}
    *_same(DISTILL, "enabled teacher_key", "distillation"),
    *_same(
        f"{DISTILL}.distillation_loss",
        "loss_mode topk use_task_rewards distillation_loss_coef loss_max_clamp log_prob_min_clamp "
        "use_policy_gradient policy_loss_mode clip_ratio clip_ratio_low clip_ratio_high",
        "distillation.distillation_loss",
    ),
    VerlName("reward.num_workers", "workers", "pool", "cpu"),
    VerlName("reward_model.num_workers", "workers", "pool", "cpu"),
    # trainer
    *_same("trainer", "total_epochs", "trainer"),
    VerlName("trainer.total_training_steps", "trainer.total_steps"),
    *_same("trainer", "save_freq test_freq val_before_train critic_warmup", "trainer"),
    VerlName("trainer.max_actor_ckpt_to_keep", "trainer.keep_checkpoints", note="null (keep all) has no counterpart"),
    VerlName("trainer.project_name", "name", note="the run directory and the wandb project"),
    VerlName("trainer.n_gpus_per_node", "gpus_per_node", "pool", "local"),
    VerlName("trainer.nnodes", "nnodes", "pool", "local"),
    VerlName("trainer.device", "device", "pool", "local", note="cuda is gpu"),
    # the V1 trainer's modes and sampler
    VerlName("trainer.v1.trainer_mode", "trainer.trainer_mode", note="colocate_async has no counterpart"),
    VerlName("trainer.v1.sampler.max_off_policy_threshold", "trainer.max_off_policy_threshold"),
    VerlName("trainer.v1.sampler.max_off_policy_strategy", "trainer.max_off_policy_strategy"),
    VerlName("trainer.v1.separate_async.num_warmup_batches", "trainer.num_warmup_batches", note="whole batches"),
    # outside the pipeline
    VerlName("trainer.logger", "logging.sinks", "project"),
    VerlName("trainer.default_local_dir", "runs_dir", "project", note="runs go to <runs_dir>/<name>/<run id>"),
    VerlName("ray_kwargs.ray_init.num_cpus", "ray.num_cpus", "project"),
    VerlName(
        "trainer.experiment_name", "rlflow run --run-dir DIR", "command", note="otherwise <runs_dir>/<name>/<run id>"
    ),
    VerlName("trainer.resume_mode", "rlflow run --resume latest", "command", note="rlflow resumes only when asked"),
    VerlName("trainer.resume_from_path", "rlflow run --resume RUN_DIR", "command"),
)

BY_VERL: dict[str, VerlName] = {name.verl: name for name in VERL_NAMES}

# Why a verl knob has no rlflow counterpart, by key prefix (the longest matching prefix wins).
WITHOUT_COUNTERPART: tuple[tuple[str, str], ...] = (
    (
        f"{ACTOR}.fsdp_config.",
        "rlflow's torch engine keeps a whole replica per worker; to shard, use "
        "update_actor with.engine: deepspeed and zero_stage",
    ),
    ("actor_rollout_ref.ref.fsdp_config.", "the reference is a frozen replica per worker"),
    (f"{ACTOR}.ulysses_sequence_parallel_size", "rlflow has no sequence parallelism"),
    (f"{ACTOR}.checkpoint.", "a checkpoint always holds the model, optimizer, data position and RNG"),
    (f"{ACTOR}.policy_loss.rollout_correction.", "rlflow trains on-policy: rollout and actor hold the same weights"),
    ("actor_rollout_ref.model.lora", "rlflow fine-tunes all weights (no LoRA)"),
    (
        "trainer.v1.separate_async.parameter_sync_step",
        "rlflow sends the rollout the weights of every step once its update is done; verl's sync every "
        "parameter_sync_step mini-batches within a step has no counterpart",
    ),
    ("trainer.v1.separate_async.hybrid_rollout.", "rlflow's trainer pool does not lend its devices to the rollout"),
    ("trainer.v1.colocate_async.", "rlflow has no colocate_async mode"),
    ("actor_rollout_ref.model.use_liger", "the model runs transformers' own kernels"),
    ("actor_rollout_ref.model.use_fused_kernels", "the model runs transformers' own kernels"),
    (f"{ROLLOUT}.tensor_model_parallel_size", "rlflow's vLLM runs one engine per worker, without tensor parallelism"),
    (f"{ROLLOUT}.gpu_memory_utilization", "rlflow's vLLM takes 0.5 of the GPU and sleeps while the actor trains"),
    (f"{ROLLOUT}.free_cache_engine", "rlflow's vLLM sleeps between generations where the platform can"),
    (f"{ROLLOUT}.enforce_eager", "rlflow chooses vLLM's engine options itself"),
    (f"{ROLLOUT}.max_num_batched_tokens", "rlflow chooses vLLM's engine options itself"),
    (f"{ROLLOUT}.dtype", "the rollout runs in model.dtype"),
    (f"{ROLLOUT}.mode", "rlflow's rollout is synchronous, inside the step"),
    ("actor_rollout_ref.hybrid_engine", "stages bound to one pool share its workers (colocated)"),
    (
        f"{CRITIC}.strategy",
        "the critic runs on rlflow's torch engine beside the actor, a whole replica per worker",
    ),
    (f"{CRITIC}.fsdp.", "the critic is a whole replica per worker, as rlflow's torch engine keeps the actor"),
    (
        f"{CRITIC}.model.fsdp_config.",
        "the critic is a whole replica per worker, as rlflow's torch engine keeps the actor (verl 0.9.1: critic.fsdp)",
    ),
    (f"{CRITIC}.megatron.", "the critic runs on rlflow's torch engine beside the actor, a whole replica per worker"),
    (f"{CRITIC}.ulysses_sequence_parallel_size", "rlflow has no sequence parallelism"),
    (
        f"{CRITIC}.grad_clip",
        "verl 0.9.1 does not read it: its critic clips at critic.optim.clip_grad (rlflow's critic.grad_clip)",
    ),
    (f"{CRITIC}.use_dynamic_bsz", "the critic's micro-batches count samples (critic.ppo_micro_batch_size_per_gpu)"),
    (
        f"{CRITIC}.ppo_max_token_len_per_gpu",
        "the critic's micro-batches count samples (critic.ppo_micro_batch_size_per_gpu)",
    ),
    (
        f"{CRITIC}.forward_max_token_len_per_gpu",
        "the critic's micro-batches count samples (with.micro_batch_size of the compute_values stage)",
    ),
    (f"{CRITIC}.shuffle", "the critic takes its mini-batches in order, as verl's default shuffle: false"),
    (f"{CRITIC}.data_loader_seed", "the critic takes its mini-batches in order; trainer.seed seeds the rest"),
    (f"{CRITIC}.checkpoint.", "a checkpoint always holds the critic's model and optimizer (its critic/ folder)"),
    (f"{CRITIC}.profiler.", "`rlflow graph --timeline RUN_DIR` shows where each step's time went"),
    (f"{CRITIC}.model.tokenizer_path", "the critic reads the policy's tokenizer (model.tokenizer)"),
    (
        f"{CRITIC}.model.enable_gradient_checkpointing",
        "the critic is built as the policy is: model.gradient_checkpointing",
    ),
    (f"{CRITIC}.model.use_remove_padding", "the critic is built as the policy is: model.use_remove_padding"),
    (f"{CRITIC}.model.lora", "rlflow fine-tunes all weights (no LoRA)"),
    (f"{CRITIC}.model.", "the critic is the model at critic.model.path, built as the policy is (model.*)"),
    (
        "trainer.max_critic_ckpt_to_keep",
        "a checkpoint holds the critic beside the policy: trainer.keep_checkpoints counts both",
    ),
    *[
        (f"{section}.{key}", "the reward model's pool is rm_pool: set its gpus_per_node and nnodes in resources")
        for section in (RM, LEGACY_RM)
        for key in ("n_gpus_per_node", "nnodes")
    ],
    *[
        (
            f"{section}.rollout.",
            "rlflow runs the reward model with transformers on its stage's workers, without a vLLM engine: "
            "reward_model.rollout holds the judge's sampling and lengths only",
        )
        for section in (RM, LEGACY_RM)
    ],
    (f"{LEGACY_RM}.model.", "rlflow loads reward_model.model_path with transformers (no external_lib, no remote code)"),
    (
        f"{LEGACY_RM}.reward_loop_",
        "a reward loop class of your own is a reward stage kind of your own (docs/pipeline_format.md#stages)",
    ),
    (f"{LEGACY_RM}.", "rlflow's reward_model: block has no such setting"),
    (f"{RM}.", "rlflow's reward_model: block has no such setting"),
    *[
        (f"{DISTILL}.{key}", "the teachers' pool is teacher_pool: set its gpus_per_node and nnodes in resources")
        for key in ("n_gpus_per_node", "nnodes")
    ],
    (f"{TEACHER}.num_replicas", "each worker of teacher_pool holds every teacher: set the pool's gpus_per_node"),
    (
        f"{TEACHER}.inference.",
        "rlflow runs the teachers with transformers on teacher_pool's workers, without a vLLM engine "
        "(inference.dtype is the teacher's dtype)",
    ),
    (
        "reward.reward_manager.",
        "rlflow scores row by row on the cpu pool, as verl's naive manager; dapo's overlong buffer is "
        "with.overlong_buffer of the reward_function stage",
    ),
    (
        "reward_model.reward_manager",
        "rlflow scores row by row on the cpu pool, as verl's naive manager; dapo's overlong buffer is "
        "with.overlong_buffer of the reward_function stage",
    ),
    ("reward.reward_kwargs.max_resp_len", "the overlong buffer measures against data.max_response_length"),
    ("reward_model.reward_kwargs.max_resp_len", "the overlong buffer measures against data.max_response_length"),
    (
        "data.gen_batch_size",
        "dynamic sampling draws its refills prompt by prompt, as verl's V1 trainer does with filter_groups on "
        "(it sets data.gen_batch_size to 1)",
    ),
    (
        "reward.custom_reward_function.reward_kwargs",
        "rlflow calls the function with verl's four keywords only; bind extra arguments in a wrapper function",
    ),
    (
        "custom_reward_function.reward_kwargs",
        "rlflow calls the function with verl's four keywords only; bind extra arguments in a wrapper function",
    ),
    ("trainer.balance_batch", "rlflow keeps the n samples of a prompt on one worker instead"),
    ("trainer.use_v1", "rlflow runs verl's synchronous step order (PPOTrainerSync)"),
    ("trainer.v1.", "rlflow runs verl's synchronous step order (PPOTrainerSync)"),
    ("trainer.log_val_generations", "validation metrics only; responses are not logged"),
    ("trainer.val_only", "validation runs with training (trainer.val_before_train)"),
    ("global_profiler.", "`rlflow graph --timeline RUN_DIR` shows where each step's time went"),
    ("data.dataloader_num_workers", "rlflow reads the whole data file at start"),
    ("data.prompt_key", "rlflow reads the column `prompt`"),
    ("data.reward_fn_key", "rlflow hands the column `data_source` to the reward"),
    ("data.custom_cls.", "rlflow reads verl's parquet columns with its own reader"),
    ("algorithm.kl_ctrl.", "rlflow's KL coefficient in the reward is fixed (kl_ctrl.type: fixed)"),
)


def why_not(key: str) -> str:
    """Why verl's ``key`` has no rlflow counterpart (the longest matching prefix), or ''."""
    key = _any_teacher(key)
    best = ""
    reason = ""
    for prefix, why in WITHOUT_COUNTERPART:
        if (key == prefix or key.startswith(prefix)) and len(prefix) > len(best):
            best, reason = prefix, why
    return reason


def _any_teacher(key: str) -> str:
    """A teacher's key with its name as ``<name>``: verl's teachers are named by the user."""
    head = f"{DISTILL}.teacher_models."
    if not key.startswith(head):
        return key
    _, _, rest = key[len(head) :].partition(".")
    return f"{TEACHER}.{rest}" if rest else TEACHER


_VERL_ONLY_SECTIONS = frozenset(
    k.split(".")[0]
    for k in [*BY_VERL, *(p for p, _ in WITHOUT_COUNTERPART)]
    if k.split(".")[0] not in ("data", "algorithm", "trainer", "model", DISTILL)  # rlflow's sections too
)


def lookup(path: Sequence) -> VerlName | None:
    """The verl knob an rlflow path that does not exist names: verl's full key
    (``actor_rollout_ref.actor.optim.lr``), or verl's last key written in the rlflow section that
    holds it (``trainer.ppo_micro_batch_size``, ``trainer.total_training_steps``)."""
    if not path or not all(isinstance(p, str) for p in path):
        return None
    dotted = ".".join(path)
    if dotted in BY_VERL:
        return BY_VERL[dotted]
    if len(path) < 2:
        return None
    section, leaf = path[0], path[-1]
    for name in VERL_NAMES:
        if name.verl.rpartition(".")[2] == leaf and name.place == "field" and name.rlflow.split(".")[0] == section:
            return name
    return None


def verl_key_hints(path: tuple, value: Any, limit: int = 12) -> list[tuple[tuple, str]] | None:
    """For an unknown key at ``path`` holding ``value``: ``(path of a verl key, hint)`` for each verl key
    found there, at most ``limit`` (then one line for the rest); None when nothing there is verl's.

    A verl section pasted whole (``actor_rollout_ref: {actor: {optim: {lr: ...}}}``) yields one
    hint per key inside it, each at its own line.
    """
    name = lookup(path)
    if name is not None:
        return [(path, name.hint())]
    if not isinstance(value, Mapping) or not path or not all(isinstance(p, str) for p in path):
        return None
    leaves = list(_leaves(path, value))
    known = [leaf for leaf in leaves if ".".join(leaf) in BY_VERL or why_not(".".join(leaf))]
    if not known and path[0] not in _VERL_ONLY_SECTIONS:
        return None
    hints = [(leaf, _leaf_hint(leaf)) for leaf in leaves]
    if len(hints) > limit:
        rest = len(hints) - limit
        more = f"{rest} more key{'s' * (rest != 1)} under {'.'.join(path)}; `rlflow import-verl` converts a verl config"
        hints = hints[:limit] + [(path, more)]
    return hints


def _leaf_hint(leaf: tuple) -> str:
    key = ".".join(leaf)
    if key in BY_VERL:
        return BY_VERL[key].hint()
    why = why_not(key)
    return f"verl's {key} has no rlflow counterpart: {why}" if why else f"rlflow has no counterpart of {key}"


def _leaves(path: tuple, value: Any):
    if isinstance(value, Mapping) and value:
        for key, child in value.items():
            yield from _leaves((*path, str(key)), child)
    else:
        yield path
