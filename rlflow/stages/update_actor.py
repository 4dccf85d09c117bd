"""Stage ``update_actor``: the GRPO policy update (verl step 8, [update_actor]).

The engine does the work (``rlflow.backends.local.actor``); this stage passes what it reads and returns the
``actor/*`` metrics. Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rlflow.stages import rollout_correction
from rlflow.stages.base import StageConfig, StageContext, StageKind, logprob_temperature
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


def teacher_reads(pipeline) -> tuple[str, ...]:
    """What distillation adds to the update's reads: the teachers' log-probs (and top-k ids)."""
    d = pipeline.distillation
    if not d.enabled:
        return ()
    return ("teacher_logprobs", "teacher_ids") if d.distillation_loss.use_topk else ("teacher_logprobs",)


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
        return fields + kl + rollout_correction.advantage_writes(pipeline) + teacher_reads(pipeline)

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        from rlflow.batch import Batch

        if ctx.pipeline.trainer.critic_warmup > ctx.step:
            return Batch()
        params = {"temperature": logprob_temperature(ctx.sampling), "global_steps": ctx.step, "stage": ctx.stage_name}
        return Batch(metrics=dict(ctx.engine.update_actor(ctx.inputs(batch), params)))
