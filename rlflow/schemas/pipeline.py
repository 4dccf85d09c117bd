"""The pipeline file format: strict, frozen pydantic models.

One ``Pipeline`` is one GRPO step declared as stages bound to resources. Pure: no torch, ray, verl or
transformers. Design notes: docs/design/schemas.md.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from rlflow.schemas.algorithms import AdvEstimator, LossMode
from rlflow.schemas.distillation import DistillationSpec
from rlflow.schemas.labels import label_key_problem, resource_problem, selector_value_problem
from rlflow.schemas.reward_model import RewardModelSpec
from rlflow.schemas.strict import StrictModel

NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]*$"
DRIVER = "driver"

LossAggMode = Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLType = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"]
DataFormat = Literal["bird", "jsonl", "parquet", "verl"]
TEXT2SQL_FORMATS = ("bird", "jsonl", "parquet")  # records of questions over databases, prompts from a template
TrainerMode = Literal["sync", "separate_async", "colocate_async"]


class ModelSpec(StrictModel):
    """The policy model: a local Hugging Face directory or a built-in model (``builtin:<name>``)."""

    path: str = Field(
        "builtin:tiny-qwen2",
        description="Local HF directory, builtin:tiny-qwen2 (no download), or builtin:tiny-sql-warm / tiny-rank-warm.",
    )
    tokenizer: str | None = Field(None, description="Tokenizer directory when it differs from `path`.")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    gradient_checkpointing: bool = False
    use_remove_padding: bool = Field(
        False,
        description="Pack the rows of a micro-batch into one sequence without padding (verl: "
        "model.use_remove_padding); off, the n samples of a prompt share one encoding of it instead.",
    )


class DataSpec(StrictModel):
    """Where prompts come from and how long prompts and responses may be."""

    format: DataFormat = Field(
        "bird",
        description="Text-to-SQL records (bird, jsonl, parquet), or verl's RL rows (verl: .parquet, .jsonl, .json).",
    )
    train: str
    val: str | None = None
    databases: str | None = Field(None, description="Root of <db_id>/<db_id>.sqlite (text-to-SQL formats).")
    root: str | None = Field(
        None, description="Data root; data paths may not escape it. Defaults to the train file's folder."
    )
    prompt_template: str | None = Field(
        None, description="Jinja2 prompt template file (text-to-SQL formats); a built-in one when omitted."
    )
    max_prompt_length: int = Field(512, gt=0)
    max_response_length: int = Field(64, gt=0)
    truncation: Literal["drop", "left", "error"] = Field(
        "error",
        description="What to do with a prompt longer than max_prompt_length: fail (verl's default), drop it "
        "(counted), or keep its tail.",
    )
    shuffle: bool = True
    max_train_samples: int | None = Field(None, gt=0)
    max_val_samples: int | None = Field(None, gt=0)


# verl's rejection-sampling options (rollout_corr_helper.SUPPORTED_ROLLOUT_RS_OPTIONS); *_k1 bound the ratio.
ROLLOUT_RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3",
)  # fmt: skip


class RolloutCorrectionSpec(StrictModel):
    """Off-policy correction against the rollout's own log-probs (verl: algorithm.rollout_correction).

    The defaults are verl's (rollout_correction.yaml): nothing corrected, the rollout-vs-actor gap
    only measured. The threshold strings are checked as verl parses them, so a value verl would
    refuse at its first step is refused here.
    """

    rollout_is: Literal["token", "sequence"] | None = Field(
        None,
        description="Truncated importance weights pi_old / pi_rollout multiplied into the policy loss: per "
        "token or per sequence; null: none.",
    )
    rollout_is_threshold: float | str = Field(
        2.0,
        description="Upper bound the weights are truncated to, or 'lower_upper' (IcePop: weights outside are zeroed).",
    )
    rollout_is_batch_normalize: bool = Field(False, description="Scale the weights to mean 1 over the batch.")
    rollout_rs: str | None = Field(
        None,
        description="Rejection sampling: tokens or sequences whose divergence passes the threshold leave the "
        f"loss; one or more (comma-separated) of {', '.join(ROLLOUT_RS_OPTIONS)}.",
    )
    rollout_rs_threshold: float | str | None = Field(
        None,
        description="One threshold, or one per rollout_rs option (comma-separated); *_k1 take 'lower_upper' "
        "ratio bounds.",
    )
    bypass_mode: bool = Field(
        False,
        description="Take the rollout's log-probs as the old policy and skip the old_log_prob pass "
        "(two policies instead of three); loss_mode trains against them, nothing corrected (verl's V1 trainer).",
    )
    loss_type: Literal["ppo_clip", "reinforce"] = Field(
        "ppo_clip",
        description="loss_mode bypass_mode's loss (verl's legacy bypass loss): PPO clip against the rollout, "
        "or REINFORCE with the importance weights.",
    )

    @field_validator("rollout_is_threshold", "rollout_rs_threshold", mode="before")
    @classmethod
    def _no_boolean(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("should be a number or a threshold string, not a boolean")
        return value

    @field_validator("rollout_is_threshold")
    @classmethod
    def _is_threshold(cls, value: float | str) -> float | str:
        bounds = _bounds(value, "rollout_is_threshold")
        if len(bounds) == 2 and bounds[0] > bounds[1]:
            raise ValueError(f"lower bound {bounds[0]} is above upper bound {bounds[1]}")
        return value

    @field_validator("rollout_rs")
    @classmethod
    def _rs_options(cls, value: str | None) -> str | None:
        if value is None:
            return value
        options = [o.strip() for o in value.split(",") if o.strip()]
        unknown = [o for o in options if o not in ROLLOUT_RS_OPTIONS]
        if not options or unknown:
            raise ValueError(
                f"unknown option {(unknown or [value])[0]!r}; expected one or more (comma-separated) of "
                f"{', '.join(ROLLOUT_RS_OPTIONS)}"
            )
        return value

    @model_validator(mode="after")
    def _rs_thresholds(self) -> RolloutCorrectionSpec:
        if self.rollout_rs is None:
            return self
        options = list(dict.fromkeys(o.strip() for o in self.rollout_rs.split(",") if o.strip()))
        if self.rollout_rs_threshold is None:
            raise ValueError("rollout_rs_threshold: rollout_rs needs a threshold (one, or one per option)")
        specs = [s.strip() for s in str(self.rollout_rs_threshold).split(",") if s.strip()]
        if len(specs) not in (1, len(options)):
            raise ValueError(
                f"rollout_rs_threshold: {len(specs)} thresholds for {len(options)} rollout_rs options; "
                "give one shared threshold or one per option"
            )
        for option, spec in zip(options, specs * len(options) if len(specs) == 1 else specs):
            bounds = _bounds(spec, f"rollout_rs_threshold for {option}")
            if option.endswith("k1") and len(bounds) == 2 and bounds[0] > bounds[1]:
                raise ValueError(f"rollout_rs_threshold for {option}: lower bound {bounds[0]} is above {bounds[1]}")
            if not option.endswith("k1") and len(bounds) == 2:
                raise ValueError(f"rollout_rs_threshold for {option}: one upper bound, not a 'lower_upper' pair")
        return self

    @property
    def active(self) -> bool:
        """Whether anything is corrected (verl's defaults only measure the rollout-vs-actor gap)."""
        return self.bypass_mode or self.rollout_is is not None or self.rollout_rs is not None


def _bounds(spec: float | str, what: str) -> tuple[float, ...]:
    """A threshold as verl parses it: one positive number, or 'lower_upper' (two positive numbers)."""
    parts = str(spec).strip().split("_", 1) if isinstance(spec, str) else [spec]
    try:
        bounds = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"{what}: {spec!r} is neither a number nor 'lower_upper' (e.g. 0.5_2.0)") from None
    if any(not b > 0 for b in bounds):  # also refuses nan
        raise ValueError(f"{what}: bounds must be positive, got {spec!r}")
    return bounds


class FilterGroupsSpec(StrictModel):
    """DAPO's dynamic sampling (verl: algorithm.filter_groups): refill the batch with groups whose metric varies."""

    enable: bool = False
    metric: str | None = Field(
        "reward",
        description="`reward` (the row's score) or a key the reward function returns (DAPO's recipe: acc); "
        "groups whose metric is the same for every sample are dropped.",
    )
    max_num_gen_batches: int = Field(
        0, description="Generation batches a step may take before it fails; 0 or less: one pass over the data."
    )
    max_inflight_gen_batches: int = Field(
        1, ge=1, description="Generation batches generated at once in one refill round (each train_batch_size)."
    )


class AlgorithmSpec(StrictModel):
    """GRPO-family knobs, with verl's names and defaults (actor.*, actor.policy_loss.* and algorithm.* in verl)."""

    adv_estimator: AdvEstimator = Field(
        "grpo", description="verl's registered advantage estimator (docs/algorithms.md)."
    )
    loss_mode: LossMode = Field(
        "vanilla", description="verl's registered policy loss (verl: actor.policy_loss.loss_mode)."
    )
    n: int = Field(8, ge=1, description="Samples per prompt (verl: actor_rollout_ref.rollout.n).")
    clip_ratio: float = Field(0.2, gt=0, description="Used only where clip_ratio_low/high are null (as in verl).")
    clip_ratio_low: float | None = Field(0.2, gt=0, description="Lower PPO clip: ratio >= 1 - clip_ratio_low.")
    clip_ratio_high: float | None = Field(0.2, gt=0, description="Upper PPO clip: ratio <= 1 + clip_ratio_high.")
    clip_ratio_c: float = Field(3.0, gt=1)
    loss_agg_mode: LossAggMode = "token-mean"
    entropy_coeff: float = Field(0.0, ge=0)
    use_kl_loss: bool = False
    kl_loss_coef: float = Field(0.001, ge=0)
    kl_loss_type: KLType = "low_var_kl"
    use_kl_in_reward: bool = False
    kl_coef: float = Field(0.001, ge=0, description="KL coefficient in the reward (verl: algorithm.kl_ctrl.kl_coef).")
    kl_penalty: KLType = "kl"
    norm_adv_by_std_in_grpo: bool = True
    rollout_correction: RolloutCorrectionSpec = Field(
        default_factory=RolloutCorrectionSpec,
        description="Off-policy correction from the rollout's log-probs (verl: algorithm.rollout_correction).",
    )
    gamma: float = Field(
        1.0, ge=0, le=1, description="Discount of gae's and reinforce_plus_plus's returns (verl: algorithm.gamma)."
    )
    lam: float = Field(1.0, ge=0, le=1, description="gae: the lambda of its advantages (verl: algorithm.lam).")
    gdpo_reward_keys: list[str] | None = Field(
        None, description="gdpo: the reward function's keys normalised one by one (verl: algorithm.gdpo_reward_keys)."
    )
    gdpo_reward_weights: list[float] | None = Field(None, description="gdpo: a weight per key (equal when null).")
    filter_groups: FilterGroupsSpec = FilterGroupsSpec()
    # policy-loss settings (verl: actor.policy_loss.* and actor.tau_pos/tau_neg)
    clip_cov_ratio: float = Field(0.0002, gt=0, description="clip_cov: fraction of tokens whose gradient is cut.")
    clip_cov_lb: float = Field(1.0, description="clip_cov: lower bound of the covariance picked.")
    clip_cov_ub: float = Field(5.0, description="clip_cov: upper bound of the covariance picked.")
    kl_cov_ratio: float = Field(0.0002, gt=0, description="kl_cov: fraction of tokens given the KL penalty.")
    ppo_kl_coef: float = Field(0.1, ge=0, description="kl_cov: coefficient of that penalty.")
    dro_beta: float | None = Field(None, gt=0, description="dro: quadratic log-ratio penalty (required for dro).")
    tau_pos: float = Field(1.0, gt=0, description="sapo: gate temperature for positive advantages.")
    tau_neg: float = Field(1.05, gt=0, description="sapo: gate temperature for negative advantages.")

    @property
    def uses_reference(self) -> bool:
        return self.use_kl_loss or self.use_kl_in_reward


class OptimSpec(StrictModel):
    """Actor optimizer (verl: actor.optim.*)."""

    name: Literal["adamw", "adam", "sgd"] = "adamw"
    lr: float = Field(1e-6, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    lr_warmup_steps: int = Field(0, ge=0)
    lr_scheduler: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float = Field(0.0, ge=0, le=1)


class CriticModelSpec(StrictModel):
    """The critic's model (verl: critic.model.*)."""

    path: str | None = Field(
        None,
        description="Where the critic starts (verl: critic.model.path); null: model.path with a fresh value head, "
        "as verl initialises it.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(None, description="null: model.dtype.")


class CriticOptimSpec(OptimSpec):
    """Critic optimizer (verl: critic.optim.*)."""

    lr: float = Field(1e-5, gt=0)


class CriticSpec(StrictModel):
    """The critic: a value model trained beside the policy for ``adv_estimator: gae`` (verl: critic.*)."""

    enable: bool | None = Field(
        None, description="Train a critic; null: when adv_estimator is gae, as verl decides (verl: critic.enable)."
    )
    model: CriticModelSpec = CriticModelSpec()
    optim: CriticOptimSpec = CriticOptimSpec()
    ppo_mini_batch_size: int | None = Field(
        None, gt=0, description="Prompts per critic optimizer step (x n inside); null: trainer.ppo_mini_batch_size."
    )
    ppo_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0, description="Samples per critic micro-batch; null: trainer.ppo_micro_batch_size_per_gpu."
    )
    ppo_epochs: int | None = Field(None, ge=1, description="Passes over each batch; null: trainer.ppo_epochs.")
    cliprange_value: float = Field(0.5, gt=0, description="Clip of the new values around the old ones.")
    loss_agg_mode: LossAggMode | None = Field(None, description="null: algorithm.loss_agg_mode.")
    grad_clip: float = Field(1.0, gt=0)


class TrainerSpec(StrictModel):
    """Batch sizes, step counts, cadence and fault policy (verl: data.*, actor.*, trainer.*)."""

    train_batch_size: int = Field(16, gt=0, description="Prompts per step.")
    ppo_mini_batch_size: int = Field(8, gt=0, description="Prompts per optimizer step (x n samples inside).")
    ppo_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0, description="Samples per forward/backward per worker (verl: ppo_micro_batch_size_per_gpu)."
    )
    log_prob_micro_batch_size_per_gpu: int | None = Field(
        None, gt=0, description="Samples per log-prob forward per worker (verl: log_prob_micro_batch_size_per_gpu)."
    )
    use_dynamic_bsz: bool = Field(
        False, description="Cut micro-batches by tokens (ppo_max_token_len_per_gpu), not samples (verl's name)."
    )
    ppo_max_token_len_per_gpu: int = Field(
        16384, gt=0, description="Prompt + response tokens per update micro-batch when use_dynamic_bsz."
    )
    log_prob_use_dynamic_bsz: bool | None = Field(
        None, description="Token-budget micro-batches for the log-prob passes; null: as use_dynamic_bsz."
    )
    log_prob_max_token_len_per_gpu: int | None = Field(
        None, gt=0, description="Tokens per log-prob micro-batch; null: as ppo_max_token_len_per_gpu."
    )
    ppo_epochs: int = Field(1, ge=1)
    total_steps: int | None = Field(None, gt=0, description="verl: trainer.total_training_steps.")
    total_epochs: int = Field(30, gt=0, description="Used when total_steps is not set (verl: trainer.total_epochs).")
    save_freq: int = Field(-1, description="Checkpoint every N steps and at the last step; -1 never.")
    test_freq: int = Field(-1, description="Validate every N steps and at the last step; -1 never.")
    val_before_train: bool = True
    seed: int = 1
    optim: OptimSpec = OptimSpec()
    grad_clip: float = Field(1.0, gt=0)
    critic_warmup: int = Field(0, ge=0)
    balance_batch: bool = Field(
        True,
        description="Reorder each step's batch so every data-parallel worker of the actor gets as many tokens "
        "(verl: trainer.balance_batch); it matters only when the actor's pool has more than one worker.",
    )
    keep_checkpoints: int = Field(2, ge=1, description="How many complete checkpoints to keep.")
    max_restarts: int = Field(
        0, ge=0, description="Worker restarts (resuming from the last checkpoint) before failing."
    )
    stage_timeout_s: float = Field(
        900.0, gt=0, description="Watchdog for every stage call unless the stage sets its own."
    )
    trainer_mode: TrainerMode = Field(
        "sync",
        description="How a step is scheduled (verl: trainer.v1.trainer_mode): sync runs every stage in turn; "
        "separate_async samples the next steps' batches on the rollout's own resource while this step trains.",
    )
    max_off_policy_threshold: int | None = Field(
        8,
        ge=1,
        description="Most policy versions a trajectory may span, from the step it was sampled in to the step that "
        "trains on it, inclusive (verl: trainer.v1.sampler.max_off_policy_threshold); null: unbounded.",
    )
    max_off_policy_strategy: Literal["drop", "wait"] = Field(
        "drop",
        description="A batch that would span more versions: drop it (fresh prompts are sampled in its place), or "
        "wait and never sample so far ahead (verl: trainer.v1.sampler.max_off_policy_strategy).",
    )
    num_warmup_batches: int = Field(
        1,
        ge=1,
        description="separate_async: batches the rollout samples ahead of the trainer "
        "(verl: trainer.v1.separate_async.num_warmup_batches).",
    )


class PinnedPool(StrictModel):
    """Where a pool's workers may run, in Ray's terms (``rlflow.schemas.labels``); by default on any node."""

    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each worker needs, as nodes offer them with `ray start --resources` "
        "(e.g. {trainer_node: 1}); CPUs and GPUs have their own keys.",
    )
    label_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Ray's node-label selector for every worker (labels from `ray start --labels`): "
        "`value`, `!value`, `in(a,b)` or `!in(a,b)` per label.",
    )

    @field_validator("resources")
    @classmethod
    def _custom_resources(cls, value: dict[str, float]) -> dict[str, float]:
        problems = [p for p in (resource_problem(name, amount) for name, amount in value.items()) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("label_selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        found = (label_key_problem(k) or selector_value_problem(k, v) for k, v in value.items())
        problems = [p for p in found if p]
        if problems:
            raise ValueError("; ".join(problems))
        return value


class LocalPool(PinnedPool):
    """A device pool on this cluster: one fused worker per device (GPU, or a CPU slot)."""

    type: Literal["local"]
    device: Literal["cpu", "gpu", "auto"] = "auto"
    gpus_per_node: int = Field(1, ge=1, description="Workers (devices) per node; on CPU, worker processes per node.")
    nnodes: int = Field(1, ge=1)
    cpus_per_worker: float = Field(1.0, gt=0)


class CpuPool(PinnedPool):
    """CPU-only worker actors (reward scoring, filters)."""

    type: Literal["cpu"]
    workers: int = Field(1, ge=1)
    cpus_per_worker: float = Field(1.0, gt=0)
    max_address_space_mb: int | None = Field(
        None,
        gt=0,
        description="RLIMIT_AS of each worker process in MB (a backstop for reward scoring); none by default",
    )


class RemotePool(PinnedPool):
    """CPU-only forwarders relaying to an out-of-process RemoteBackend that owns its own GPUs."""

    type: Literal["remote"]
    backend: str
    forwarders: int = Field(1, ge=1)
    cpus_per_forwarder: float = Field(0.1, gt=0)
    config: dict[str, Any] = Field(default_factory=dict)


Resource = Annotated[LocalPool | CpuPool | RemotePool, Field(discriminator="type")]


def data_parallel_size(resource: LocalPool | CpuPool | RemotePool) -> int:
    """Workers an update is split over: every device of a local pool; one for a remote backend (it splits inside)."""
    return resource.gpus_per_node * resource.nnodes if resource.type == "local" else 1


class StageSpec(StrictModel):
    """One stage of the step: a name, the stage kind it uses, where it runs and its own config."""

    name: str = Field(pattern=NAME_PATTERN)
    uses: str
    on: str = Field(description="A resource name, or `driver`.")
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    timeout_s: float | None = Field(
        None, gt=0, description="Watchdog for this stage; defaults to trainer.stage_timeout_s."
    )


class Pipeline(StrictModel):
    """A whole pipeline file."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    model: ModelSpec = ModelSpec()
    data: DataSpec
    algorithm: AlgorithmSpec = AlgorithmSpec()
    trainer: TrainerSpec = TrainerSpec()
    critic: CriticSpec = CriticSpec()
    reward_model: RewardModelSpec = RewardModelSpec()
    distillation: DistillationSpec = DistillationSpec()
    resources: dict[str, Resource] = Field(default_factory=dict)
    stages: list[StageSpec]

    def stage(self, name: str) -> StageSpec | None:
        return next((s for s in self.stages if s.name == name), None)

    @property
    def uses_critic(self) -> bool:
        """Whether the step trains a critic: ``critic.enable``, or when unset, ``adv_estimator: gae`` (verl's rule)."""
        return self.critic.enable if self.critic.enable is not None else self.algorithm.adv_estimator == "gae"
