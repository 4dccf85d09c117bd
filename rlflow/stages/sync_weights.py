"""Stage ``sync_weights``: the rollout engine takes the actor's new weights (verl [update_weights]).

Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


@builtin_stage
class SyncWeights(StageKind):
    name = "sync_weights"
    role = "weight_sync"
    verl_timer = "update_weights"
    reads_fields = ("actor_weights",)
    writes_fields = ("rollout_weights",)
    dispatch = "all"
    description = "Push the actor's weights to the rollout engine."

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        from rlflow.batch import Batch

        return Batch(metrics=dict(ctx.engine.update_weights(ctx.step)))
