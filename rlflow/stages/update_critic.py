"""Stage ``update_critic``: the critic's update on the step's returns (verl step 8, [update_critic]).

verl's clipped value loss (``compute_value_loss``) over ``critic.ppo_mini_batch_size x n`` samples,
``critic.ppo_epochs`` passes; ``critic/*`` metrics. Design notes: docs/design/critic.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


@builtin_stage
class UpdateCritic(StageKind):
    name = "update_critic"
    role = "critic_update"
    engine_roles = frozenset({"critic"})
    allowed_on = frozenset({"local"})
    verl_timer = "update_critic"
    reads_fields = ("prompts", "prompt_mask", "responses", "response_mask", "values", "returns")
    writes_fields = ("critic_weights",)
    description = "Critic update with verl's clipped value loss."

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        from rlflow.batch import Batch

        params = {"global_steps": ctx.step, "stage": ctx.stage_name}
        return Batch(metrics=dict(ctx.engine.update_critic(ctx.inputs(batch), params)))
