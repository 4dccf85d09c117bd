"""Stage ``sync_weights``: the rollout engine takes the actor's new weights (verl [update_weights]).

Runs after the update and the checkpoint, before validation and the next generation, and
once at init before the first generation, on every worker of the actor's pool. Colocated
actor and rollout share tensors, so the sync copies nothing (``sync/bytes`` = 0) and only
records the policy version. A rollout on another pool receives the weights from the runtime
afterwards (export on the actor, load on the rollout), which reports the bytes moved.
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
