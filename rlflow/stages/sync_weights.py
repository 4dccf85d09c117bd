"""Stage ``sync_weights``: the rollout engine takes the actor's new weights (verl [update_weights]).

Runs after the update and the checkpoint, before validation and the next generation, and
once at init before the first generation. Colocated actor and rollout share tensors, so the
sync copies nothing (``sync/bytes`` = 0); a separate rollout receives weights through a
transport whose bytes and seconds are reported.
"""

from __future__ import annotations

from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.registry import register_stage


@register_stage
class SyncWeights(StageKind):
    name = "sync_weights"
    verl_timer = "update_weights"
    reads_fields = ("actor_weights",)
    writes_fields = ("rollout_weights",)
    dispatch = "all"
    description = "Push the actor's weights to the rollout engine."

    def run(self, batch, ctx: StageContext):
        from rlflow.stages.impl.sync import run_sync_weights

        return run_sync_weights(batch, ctx)
