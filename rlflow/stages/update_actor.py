"""Stage ``update_actor``: the GRPO policy update (verl step 8, [update_actor]).

Mini-batches of ``ppo_mini_batch_size x n`` samples, micro-batches with gradient
accumulation, ``ppo_epochs`` passes, gradient clipping; loss from verl's vanilla policy
loss with dual clip, plus entropy and KL terms as verl adds them. The engine does the work
(see ``rlflow.backends.local.actor``); this stage passes the fields it reads, the rollout
temperature and the step and stage names (for error messages), and returns the ``actor/*``
metrics. The actor is not updated before ``trainer.critic_warmup`` steps, as in verl.
With ``algorithm.rollout_correction`` it reads the old policy's log-probs where that section puts
them, and the importance weights and rejection mask when the advantage step computed them
(``rlflow.stages.rollout_correction``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rlflow.stages import rollout_correction
from rlflow.stages.base import StageConfig, StageContext, StageKind, logprob_temperature
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


class UpdateActorConfig(StageConfig):
    engine: Literal["torch", "deepspeed"] = "torch"
    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage (engine: deepspeed).")


@builtin_stage
class UpdateActor(StageKind):
    name = "update_actor"
    needs_sampling = True
    role = "update"
    engine_roles = frozenset({"actor"})
    config_model = UpdateActorConfig
    verl_timer = "update_actor"
    reads_fields = ("prompts", "prompt_mask", "responses", "response_mask", "old_log_probs", "advantages")
    writes_fields = ("actor_weights",)
    description = "PPO-clip policy update with verl's GRPO loss."

    @classmethod
    def reads(cls, pipeline, stage):
        old = rollout_correction.old_log_probs_field(pipeline)
        fields = tuple(old if f == "old_log_probs" else f for f in cls.reads_fields)
        kl = ("ref_log_prob",) if pipeline.algorithm.use_kl_loss else ()
        return fields + kl + rollout_correction.advantage_writes(pipeline)

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        from rlflow.batch import Batch

        if ctx.pipeline.trainer.critic_warmup > ctx.step:
            return Batch()
        params = {"temperature": logprob_temperature(ctx.sampling), "global_steps": ctx.step, "stage": ctx.stage_name}
        return Batch(metrics=dict(ctx.engine.update_actor(ctx.inputs(batch), params)))
