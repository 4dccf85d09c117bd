"""The ``distillation:`` block: on-policy distillation from teacher models (verl: distillation.*).

The student samples, each teacher scores the student's tokens, and the student's loss takes verl's
distillation term (``verl/trainer/distillation/losses.py``). Pure: pydantic only.
Design notes: docs/design/distillation.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlflow.schemas.strict import StrictModel

ESTIMATOR_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")  # one log-prob per token
TOPK_MODES = ("forward_kl_topk",)  # the teacher's top-k log-probs per token
DistillationLossMode = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "forward_kl_topk"]


class DistillationLossSpec(StrictModel):
    """verl: distillation.distillation_loss.*"""

    loss_mode: DistillationLossMode = Field("k3", description="A single-sample KL estimator, or forward_kl_topk.")
    topk: int = Field(32, gt=0, description="The teacher's top-k log-probs per token (forward_kl_topk).")
    use_task_rewards: bool = Field(True, description="Keep the policy-gradient loss on the task's rewards too.")
    distillation_loss_coef: float = Field(
        1.0, allow_inf_nan=False, description="The distillation term's weight when use_task_rewards is on."
    )
    loss_max_clamp: float | None = Field(None, gt=0, description="Clamp of the per-token loss to [-c, c].")
    log_prob_min_clamp: float | None = Field(None, description="Floor of the top-k log-probs (forward_kl_topk).")
    use_policy_gradient: bool = Field(
        False, description="Apply the distillation loss as a reward (advantage -loss) through a policy loss."
    )
    policy_loss_mode: Literal["vanilla"] = Field(
        "vanilla", description="The policy loss of use_policy_gradient (verl supports vanilla only)."
    )
    clip_ratio: float = Field(0.2, gt=0)
    clip_ratio_low: float = Field(0.2, gt=0)
    clip_ratio_high: float = Field(0.2, gt=0)

    @property
    def use_topk(self) -> bool:
        return self.loss_mode in TOPK_MODES

    @model_validator(mode="after")
    def _k1_needs_policy_gradient(self) -> DistillationLossSpec:
        if self.loss_mode == "k1" and not self.use_policy_gradient:  # verl refuses k1 only (kl is the same math)
            raise ValueError(
                f"loss_mode {self.loss_mode} as a supervised loss has a gradient that does not depend on the "
                "teacher (verl refuses it); set use_policy_gradient: true, or use k3 / low_var_kl / forward_kl_topk"
            )
        return self


class TeacherModelSpec(StrictModel):
    """One teacher (verl: distillation.teacher_models.<name>.*)."""

    key: str | None = Field(
        None, description="The value of distillation.teacher_key (data_source) whose rows it teaches."
    )
    model_path: str = Field(description="A local Hugging Face directory or builtin:<name> (a causal LM).")
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(None, description="null: model.dtype.")


class DistillationSpec(StrictModel):
    """On-policy distillation (verl: distillation.*)."""

    enabled: bool = False
    teacher_key: str = Field("data_source", description="The row field that routes a row to its teacher.")
    teacher_models: dict[str, TeacherModelSpec] = Field(
        default_factory=dict, description="Teachers by name; one teacher takes every row."
    )
    distillation_loss: DistillationLossSpec = DistillationLossSpec()
    micro_batch_size_per_gpu: int | None = Field(
        None, gt=0, description="Rows per teacher forward; null: trainer.log_prob_micro_batch_size_per_gpu."
    )

    @model_validator(mode="after")
    def _teachers(self) -> DistillationSpec:
        if self.enabled and not self.teacher_models:
            raise ValueError("distillation is enabled but teacher_models is empty; add one teacher with a model_path")
        if len(self.teacher_models) > 1:
            unkeyed = [name for name, t in self.teacher_models.items() if t.key is None]
            if unkeyed:
                raise ValueError(
                    f"teacher_models {unkeyed} have no `key`: with several teachers each names the "
                    f"{self.teacher_key} value of the rows it teaches"
                )
        return self

    def teacher_for(self, routing_key: str | None) -> str:
        """The teacher a row goes to (verl's ``_resolve_teacher_key``): the only one, else the one keyed by it."""
        if len(self.teacher_models) == 1:
            return next(iter(self.teacher_models))
        for name, teacher in self.teacher_models.items():
            if teacher.key == routing_key:
                return name
        raise KeyError(
            f"no teacher for {self.teacher_key}={routing_key!r}; teachers: "
            + ", ".join(f"{n} ({t.key})" for n, t in self.teacher_models.items())
        )
