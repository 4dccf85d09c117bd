"""``run_old_log_prob`` and ``run_ref_log_prob``: response log-probs under the actor and the reference.

Design decisions:
- Log-probs are taken at the rollout's temperature (the generate stage's), as verl does, so
  the PPO ratio compares the policy with the distribution that was actually sampled.
- ``actor/entropy`` is verl's: the entropy aggregated with ``loss_agg_mode`` over the rows this
  worker saw; the runtime averages shard metrics, which equals the whole batch's value when
  shards hold equal token counts and is close to it otherwise.
"""

from __future__ import annotations

from rlflow.batch import Batch
from rlflow.stages.base import StageContext

LOG_PROB_FIELDS = ("prompts", "prompt_mask", "responses", "response_mask")


def rollout_temperature(pipeline) -> float:
    """The sampling temperature of the pipeline's generate stage (1.0 when greedy or absent)."""
    from rlflow.stages.generate import GenerateConfig

    stages = pipeline.stages_using("generate")
    temperature = GenerateConfig.model_validate(stages[0].with_).temperature if stages else 1.0
    return temperature if temperature > 0 else 1.0


def log_prob_params(ctx: StageContext) -> dict:
    """Micro-batch: the stage's, else trainer.log_prob_micro_batch_size, else the update's micro-batch."""
    trainer = ctx.pipeline.trainer
    size = ctx.config.micro_batch_size or trainer.log_prob_micro_batch_size or trainer.ppo_micro_batch_size
    return {"micro_batch_size": size, "temperature": rollout_temperature(ctx.pipeline)}


def run_old_log_prob(batch: Batch, ctx: StageContext) -> Batch:
    from verl.trainer.ppo.core_algos import agg_loss

    out = ctx.engine.compute_log_prob(batch.select(LOG_PROB_FIELDS), log_prob_params(ctx))
    if len(batch):
        entropy = agg_loss(out["entropys"], batch["response_mask"].bool(), ctx.pipeline.algorithm.loss_agg_mode)
        out.metrics["actor/entropy"] = float(entropy)
    return out


def run_ref_log_prob(batch: Batch, ctx: StageContext) -> Batch:
    return ctx.engine.compute_ref_log_prob(batch.select(LOG_PROB_FIELDS), log_prob_params(ctx))
