"""``run_grpo_advantage``: token-level rewards and GRPO advantages, on the driver.

Design decisions:
- The math is verl's own: ``core_algos.kl_penalty`` for the in-reward KL (applied as verl's
  ``apply_kl_penalty`` does, with a fixed coefficient) and
  ``core_algos.compute_grpo_outcome_advantage`` grouped by ``uid``; nothing is re-derived here.
- It runs on the driver over the whole batch, because a group must be complete to be
  normalised (groups never straddle workers, but filters may have reshaped the batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.stages.base import StageContext

if TYPE_CHECKING:  # pragma: no cover
    import torch


def token_level_rewards(batch: Batch, algorithm) -> tuple[torch.Tensor, dict[str, float]]:
    """Scores, minus ``kl_coef`` x KL(old, ref) per token when ``use_kl_in_reward``."""
    import torch
    from verl.trainer.ppo import core_algos
    from verl.utils.torch_functional import masked_mean

    scores = batch["token_level_scores"].float()
    if not algorithm.use_kl_in_reward:
        return scores, {}
    mask = batch["response_mask"].float()
    kld = core_algos.kl_penalty(batch["old_log_probs"], batch["ref_log_prob"], kl_penalty=algorithm.kl_penalty) * mask
    current_kl = torch.mean(masked_mean(kld, mask=mask, axis=-1), dim=0).item()
    metrics = {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": algorithm.kl_coef}
    return scores - algorithm.kl_coef * kld, metrics


def run_grpo_advantage(batch: Batch, ctx: StageContext) -> Batch:
    from verl.trainer.ppo import core_algos

    missing = [f for f in ("token_level_scores", "response_mask", "uid") if f not in batch]
    if missing:
        raise StageError(f"step {ctx.step}, stage {ctx.stage_name!r}: the batch lacks {missing}; "
                         f"a reward stage must write token_level_scores before the advantage")
    algorithm = ctx.pipeline.algorithm
    rewards, metrics = token_level_rewards(batch, algorithm)
    index = np.array(batch["uid"], dtype=object)
    advantages, returns = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=rewards, response_mask=batch["response_mask"], index=index,
        epsilon=1e-6, norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
    )
    return Batch({"token_level_rewards": rewards, "advantages": advantages, "returns": returns}, metrics=metrics)
