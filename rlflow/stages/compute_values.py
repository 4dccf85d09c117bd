"""Stage ``compute_values``: the critic's value of each response token (verl step 6, [values]).

The value of token t is the critic's output at the position before it, zero past the response, as verl
masks it. Design notes: docs/design/critic.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


class ValuesConfig(StageConfig):
    micro_batch_size: int | None = Field(
        None,
        gt=0,
        description="Samples per forward (verl: critic.forward_micro_batch_size_per_gpu); null: "
        "critic.ppo_micro_batch_size_per_gpu, else trainer.log_prob_micro_batch_size_per_gpu.",
    )


@builtin_stage
class ComputeValues(StageKind):
    name = "compute_values"
    role = "values"
    engine_roles = frozenset({"critic"})
    allowed_on = frozenset({"local"})
    config_model = ValuesConfig
    verl_timer = "values"
    reads_fields = ("prompts", "prompt_mask", "responses", "response_mask")
    writes_fields = ("values",)
    description = "The critic's values of the response tokens."

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        critic, trainer = ctx.pipeline.critic, ctx.pipeline.trainer
        size = (
            ctx.config.micro_batch_size
            or critic.ppo_micro_batch_size_per_gpu
            or trainer.log_prob_micro_batch_size_per_gpu
            or trainer.ppo_micro_batch_size_per_gpu
        )
        return ctx.engine.compute_values(ctx.inputs(batch), {"micro_batch_size": size})
