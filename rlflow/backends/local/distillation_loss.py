"""verl 0.9.1's on-policy distillation loss on padded [B, R] tensors (``verl/trainer/distillation/losses.py``).

The same math as verl's ``distillation_ppo_loss`` / ``distillation_loss`` and its two loss families (the
single-sample reverse-KL estimators, forward_kl_topk), with verl's own ``kl_penalty``, ``agg_loss`` and policy
loss functions; only verl's nested-tensor plumbing is left out. Metrics keep verl's names. Design notes:
docs/design/distillation.md.
"""

from __future__ import annotations

from typing import Any

import torch

ESTIMATOR_METRICS = ("distillation/abs_loss",)
TOPK_METRICS = (
    "distillation/student_mass",
    "distillation/student_mass_min",
    "distillation/student_mass_max",
    "distillation/teacher_mass",
    "distillation/teacher_mass_min",
    "distillation/teacher_mass_max",
    "distillation/overlap_ratio",
    "distillation/overlap_token_advantage",
)
RANGE_METRICS = ("distillation/loss_min", "distillation/loss_max")


def verl_loss_config(spec):
    """verl's ``DistillationLossConfig`` of ``distillation.distillation_loss`` (its checks run here)."""
    from verl.workers.config import DistillationLossConfig

    return DistillationLossConfig(**spec.model_dump())


def uses_topk(loss_config) -> bool:
    """Whether the loss mode reads the teacher's top-k (verl's registered ``DistillationLossSettings``)."""
    return loss_config.loss_settings.use_topk


def metric_names(loss_config, actor_config) -> tuple[str, ...]:
    """Every metric the distillation term reports but ``distillation/loss`` (a fixed set, as ranks reduce alike)."""
    names = [*RANGE_METRICS, *(TOPK_METRICS if uses_topk(loss_config) else ESTIMATOR_METRICS)]
    if loss_config.use_policy_gradient:
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        one, mask = torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool)
        loss_config.global_batch_info.update(actor_config.global_batch_info)
        _, pg = get_policy_loss_fn(loss_config.policy_loss_mode)(
            old_log_prob=one, log_prob=one, advantages=one, response_mask=mask, loss_agg_mode="token-mean",
            config=loss_config,
        )  # fmt: skip
        names += [_pg_name(k) for k in pg]
    return tuple(names)


# ---- the per-token losses -------------------------------------------------------------------------
def estimator_losses(
    log_prob: torch.Tensor, teacher_logprobs: torch.Tensor, response_mask: torch.Tensor, loss_mode: str
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl's ``compute_distillation_loss_reverse_kl_estimator``: ``kl_penalty(student, teacher, loss_mode)``."""
    from verl.trainer.ppo.core_algos import kl_penalty

    losses = kl_penalty(logprob=log_prob, ref_logprob=teacher_logprobs.squeeze(-1), kl_penalty=loss_mode)
    return losses, {"distillation/abs_loss": _masked_mean(losses.detach().abs(), response_mask)}


def forward_kl_topk(
    student_topk_log_probs: torch.Tensor,
    student_topk_ids: torch.Tensor,
    teacher_topk_log_probs: torch.Tensor,
    teacher_topk_ids: torch.Tensor,
    loss_config,
) -> dict[str, torch.Tensor]:
    """verl's fsdp ``compute_forward_kl_topk`` after its log-softmax: per-token losses [B, R] and diagnostics.

    ``student_topk_log_probs``: the student's log-softmax at the teacher's ids; ``student_topk_ids``: its own top-k.
    """
    from verl.trainer.distillation.fsdp.losses import kl_divergence

    student_mass = student_topk_log_probs.exp().sum(dim=-1)
    teacher_mass = teacher_topk_log_probs.exp().sum(dim=-1)
    if loss_config.log_prob_min_clamp is not None:
        student_topk_log_probs = student_topk_log_probs.clamp_min(loss_config.log_prob_min_clamp)
        teacher_topk_log_probs = teacher_topk_log_probs.clamp_min(loss_config.log_prob_min_clamp)
    losses = kl_divergence(log_q=student_topk_log_probs, log_p=teacher_topk_log_probs)
    # the overlap of the two top-k sets (arXiv:2604.13016), as verl logs it
    overlap_mask = (teacher_topk_ids.unsqueeze(-1) == student_topk_ids.unsqueeze(-2)).any(dim=-1)
    overlap_count = overlap_mask.sum(dim=-1)
    token_kl = teacher_topk_log_probs.exp() * (teacher_topk_log_probs - student_topk_log_probs)
    advantage = (-token_kl * overlap_mask).sum(dim=-1) / overlap_count.clamp_min(1)
    advantage = torch.where(overlap_count > 0, advantage, torch.zeros_like(advantage))
    return {
        "distillation_losses": losses,
        "student_mass": student_mass,
        "teacher_mass": teacher_mass,
        "overlap_count": overlap_count,
        "overlap_token_advantage": advantage,
    }


def topk_losses(outputs: dict[str, torch.Tensor], response_mask: torch.Tensor, topk: int):
    """verl's ``losses.compute_forward_kl_topk``: the metrics of ``forward_kl_topk``'s outputs, losses clamped at 0."""
    mask = response_mask.bool()
    student_mass, teacher_mass = outputs["student_mass"].detach(), outputs["teacher_mass"].detach()
    count, advantage = outputs["overlap_count"], outputs["overlap_token_advantage"].detach()
    overlapped = mask & (count > 0)
    metrics = {
        "distillation/student_mass": _masked_mean(student_mass, mask),
        "distillation/student_mass_min": _masked_min(student_mass, mask),
        "distillation/student_mass_max": _masked_max(student_mass, mask),
        "distillation/teacher_mass": _masked_mean(teacher_mass, mask),
        "distillation/teacher_mass_min": _masked_min(teacher_mass, mask),
        "distillation/teacher_mass_max": _masked_max(teacher_mass, mask),
        "distillation/overlap_ratio": _masked_mean(count.float(), mask) / topk,
        "distillation/overlap_token_advantage": _masked_mean(advantage, overlapped),  # 0.0 when none overlap
    }
    # top-k distributions do not sum to 1, so the divergence can be negative
    return outputs["distillation_losses"].clamp_min(0.0), metrics


# ---- the aggregated term ----------------------------------------------------------------------
def distillation_loss(
    losses: torch.Tensor,
    metrics: dict[str, Any],
    response_mask: torch.Tensor,
    *,
    loss_config,
    actor_config,
    log_prob: torch.Tensor | None = None,
    old_log_prob: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl's ``distillation_loss``: range metrics, ``loss_max_clamp``, then a supervised ``agg_loss`` with the
    actor's ``loss_agg_mode`` and global batch info, or (``use_policy_gradient``) the policy loss with advantages
    ``-losses``."""
    from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn

    metrics = {**metrics, **loss_range(losses.detach(), response_mask)}
    if loss_config.loss_max_clamp is not None:  # the min clamp is for k1, which can be negative
        losses = losses.clamp(min=-loss_config.loss_max_clamp, max=loss_config.loss_max_clamp)
    info = actor_config.global_batch_info
    if not loss_config.use_policy_gradient:  # a supervised loss (arXiv:2306.13649)
        loss = agg_loss(loss_mat=losses, loss_mask=response_mask, loss_agg_mode=actor_config.loss_agg_mode, **info)
        return loss, metrics
    # the negative loss as a reward (thinkingmachines.ai/blog/on-policy-distillation)
    loss_config.global_batch_info.update(info)
    loss, pg_metrics = get_policy_loss_fn(loss_config.policy_loss_mode)(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=-losses.detach(),
        response_mask=response_mask,
        loss_agg_mode=actor_config.loss_agg_mode,
        config=loss_config,
        rollout_is_weights=rollout_is_weights,
    )
    return loss, {**metrics, **{_pg_name(k): v for k, v in pg_metrics.items()}}


def distillation_ppo_loss(policy_loss, distill_loss: torch.Tensor, loss_config):
    """verl's combination: the policy loss only with task rewards, and the coefficient only then too."""
    if not loss_config.use_task_rewards:
        policy_loss = 0.0
    coef = loss_config.distillation_loss_coef if loss_config.use_task_rewards else 1.0
    return policy_loss + distill_loss * coef


def needs_policy_loss(loss_config) -> bool:
    """verl computes the task's policy loss (for its metrics at least) unless both switches are off."""
    return loss_config.use_task_rewards or loss_config.use_policy_gradient


def loss_range(losses: torch.Tensor, response_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """verl's ``compute_distillation_loss_range``: min and max of the per-token loss over the response."""
    return {
        "distillation/loss_min": _masked_min(losses, response_mask),
        "distillation/loss_max": _masked_max(losses, response_mask),
    }


# ---- helpers ----------------------------------------------------------------------------------
def _pg_name(key: str) -> str:
    return f"distillation/{key[len('actor/') :]}" if key.startswith("actor/") else f"distillation/{key}"


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean over ``mask`` (0 when it is empty, where verl's ``.mean()`` would give NaN), without a host read."""
    mask = mask.bool()
    return values.float().masked_fill(~mask, 0.0).sum() / mask.sum().clamp_min(1)


def _masked_min(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.bool()
    low = values.float().masked_fill(~mask, float("inf")).amin()
    return torch.where(mask.any(), low, torch.zeros_like(low))  # 0 for an empty mask (verl's min would raise)


def _masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.bool()
    high = values.float().masked_fill(~mask, float("-inf")).amax()
    return torch.where(mask.any(), high, torch.zeros_like(high))
