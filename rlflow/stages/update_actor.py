"""Stage ``update_actor``: the GRPO policy update (verl step 8, [update_actor]).

Mini-batches of ``ppo_mini_batch_size x n`` samples, micro-batches with gradient
accumulation, ``ppo_epochs`` passes, gradient clipping; loss from verl's vanilla policy
loss with dual clip, plus entropy and KL terms as verl adds them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import register_stage


class UpdateActorConfig(StageConfig):
    engine: Literal["torch", "deepspeed"] = "torch"
    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage (engine: deepspeed).")


@register_stage
class UpdateActor(StageKind):
    name = "update_actor"
    config_model = UpdateActorConfig
    verl_timer = "update_actor"
    reads_fields = ("prompts", "prompt_mask", "responses", "response_mask", "old_log_probs", "advantages")
    writes_fields = ("actor_weights",)
    description = "PPO-clip policy update with verl's GRPO loss."

    @classmethod
    def reads(cls, pipeline, stage):
        return cls.reads_fields + (("ref_log_prob",) if pipeline.algorithm.use_kl_loss else ())

    def run(self, batch, ctx: StageContext):
        from rlflow.stages.impl.update import run_update_actor

        return run_update_actor(batch, ctx)
