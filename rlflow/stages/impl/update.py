"""``run_update_actor``: one GRPO policy update on the worker's shard (verl [update_actor]).

The engine does the work (mini-batches, micro-batches, epochs, clipping; see
``rlflow.backends.local.actor``); this stage picks the fields, passes the rollout temperature
and the step and stage names (for error messages), and returns the ``actor/*`` metrics. The
actor is not updated before ``trainer.critic_warmup`` steps, as in verl.
"""

from __future__ import annotations

from rlflow.batch import Batch
from rlflow.stages.base import StageContext
from rlflow.stages.impl.log_prob import rollout_temperature

UPDATE_FIELDS = ("prompts", "prompt_mask", "responses", "response_mask", "old_log_probs", "advantages", "ref_log_prob")


def run_update_actor(batch: Batch, ctx: StageContext) -> Batch:
    if ctx.pipeline.trainer.critic_warmup > ctx.step:
        return Batch()
    params = {"temperature": rollout_temperature(ctx.pipeline), "global_steps": ctx.step, "stage": ctx.stage_name}
    metrics = ctx.engine.update_actor(batch.select(UPDATE_FIELDS), params)
    return Batch(metrics=dict(metrics))
