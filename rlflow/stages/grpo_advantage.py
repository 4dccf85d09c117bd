"""Stage ``grpo_advantage``: token-level rewards and the advantages of ``algorithm.adv_estimator``.

verl step 7 ([adv]), with verl's own math, on the driver over the whole batch. Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlflow.errors import StageError
from rlflow.stages import rollout_correction
from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from rlflow.batch import Batch


def token_level_rewards(batch: Batch, algorithm, old: str = "old_log_probs") -> tuple[torch.Tensor, dict[str, float]]:
    """Scores, minus ``kl_coef`` x KL(old, ref) per token when ``use_kl_in_reward``.

    ``old`` names the old policy's field (the rollout's log-probs in bypass mode, as verl copies them).
    """
    import torch
    from verl.trainer.ppo import core_algos
    from verl.utils.torch_functional import masked_mean

    scores = batch["token_level_scores"].float()
    if not algorithm.use_kl_in_reward:
        return scores, {}
    mask = batch["response_mask"].float()
    kld = core_algos.kl_penalty(batch[old], batch["ref_log_prob"], kl_penalty=algorithm.kl_penalty) * mask
    current_kl = torch.mean(masked_mean(kld, mask=mask, axis=-1), dim=0).item()
    metrics = {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": algorithm.kl_coef}
    return scores - algorithm.kl_coef * kld, metrics


@builtin_stage
class GrpoAdvantage(StageKind):
    name = "grpo_advantage"
    role = "advantage"
    verl_timer = "adv"
    reads_fields = ("token_level_scores", "response_mask", "uid")
    writes_fields = ("token_level_rewards", "advantages", "returns")
    allowed_on = frozenset({"driver", "cpu", "local"})
    dispatch = "driver"
    description = "Advantages of algorithm.adv_estimator (verl's registered function), grouped by uid."

    @classmethod
    def reads(cls, pipeline, stage):
        old = rollout_correction.old_log_probs_field(pipeline)
        extra = (old, "ref_log_prob") if pipeline.algorithm.use_kl_in_reward else ()
        corrected = tuple(f for f in rollout_correction.advantage_reads(pipeline) if f not in extra)
        values = ("values",) if pipeline.algorithm.adv_estimator == "gae" else ()
        return cls.reads_fields + extra + corrected + values

    @classmethod
    def writes(cls, pipeline, stage):
        return cls.writes_fields + rollout_correction.advantage_writes(pipeline)

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        import numpy as np
        from verl.trainer.ppo import core_algos

        from rlflow.batch import Batch

        missing = [f for f in self.reads_fields if f not in batch]
        if missing:
            raise StageError(
                f"step {ctx.step}, stage {ctx.stage_name!r}: the batch lacks {missing}; "
                f"a reward stage must write token_level_scores before the advantage"
            )
        algorithm = ctx.pipeline.algorithm
        rewards, metrics = token_level_rewards(batch, algorithm, rollout_correction.old_log_probs_field(ctx.pipeline))
        corrected: dict = {}
        if rollout_correction.decoupled(ctx.pipeline):
            corrected, corr_metrics = rollout_correction.correct(batch, algorithm.rollout_correction)
            metrics.update(corr_metrics)
        mask = corrected.get(rollout_correction.RS_MASK, batch["response_mask"])
        index = np.array(batch["uid"], dtype=object)
        if algorithm.adv_estimator == "gae":  # verl's compute_advantage calls it apart, with gamma and lam
            advantages, returns = core_algos.compute_gae_advantage_return(
                token_level_rewards=rewards,
                values=batch["values"].float(),
                response_mask=mask,
                gamma=algorithm.gamma,
                lam=algorithm.lam,
            )
        elif algorithm.adv_estimator == "grpo":
            advantages, returns = core_algos.compute_grpo_outcome_advantage(
                token_level_rewards=rewards,
                response_mask=mask,
                index=index,
                epsilon=1e-6,
                norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
            )
        else:
            kwargs = {"config": verl_algo_config(algorithm), "index": index}
            if algorithm.adv_estimator == "gdpo":
                kwargs.update(gdpo_inputs(batch, algorithm, ctx))
            advantages, returns = core_algos.get_adv_estimator_fn(algorithm.adv_estimator)(
                token_level_rewards=rewards, response_mask=mask, **kwargs
            )
        out = {"token_level_rewards": rewards, "advantages": advantages, "returns": returns, **corrected}
        return Batch(out, metrics=metrics)


def verl_algo_config(algorithm):
    """verl's ``AlgoConfig`` with the pipeline's estimator knobs (what verl's estimators read from ``config``)."""
    from verl.trainer.config import AlgoConfig

    return AlgoConfig(
        gamma=algorithm.gamma,
        adv_estimator=algorithm.adv_estimator,
        norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
        use_kl_in_reward=algorithm.use_kl_in_reward,
        kl_penalty=algorithm.kl_penalty,
        gdpo_reward_keys=list(algorithm.gdpo_reward_keys) if algorithm.gdpo_reward_keys else None,
        gdpo_reward_weights=list(algorithm.gdpo_reward_weights) if algorithm.gdpo_reward_weights else None,
    )


def gdpo_inputs(batch: Batch, algorithm, ctx: StageContext) -> dict:
    """What verl hands gdpo: the reward function's per-key values and the prompts with verl's attention mask."""
    import numpy as np
    import torch

    extras = batch["reward_extra"] if "reward_extra" in batch else [{}] * len(batch)
    columns = {}
    for key in algorithm.gdpo_reward_keys:
        missing = [row for row, extra in enumerate(extras) if key not in extra]
        if missing:
            known = sorted(extras[missing[0]])
            raise StageError(
                f"step {ctx.step}, stage {ctx.stage_name!r}: algorithm.gdpo_reward_keys names {key!r}, which the "
                f"reward did not return for row {missing[0]} (it returned {known}); return it from the reward function"
            )
        columns[key] = np.array([extra[key] for extra in extras], dtype=np.float32)
    attention = torch.cat([batch["prompt_mask"], batch["response_mask"]], dim=-1)
    return {"non_tensor_batch": columns, "batch": {"prompts": batch["prompts"], "attention_mask": attention}}
