"""Stage ``save_checkpoint``: model, optimizer and RNG state of every worker (verl [save_checkpoint]).

Runs when ``trainer.save_freq`` hits (and at the last step), after the update and before
the weight sync. The runtime adds it when the pipeline does not declare it; it writes to a
temporary directory that the runtime renames into place once every part is on disk.
"""

from __future__ import annotations

from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.registry import register_stage


@register_stage
class SaveCheckpoint(StageKind):
    name = "save_checkpoint"
    verl_timer = "save_checkpoint"
    reads_fields = ("actor_weights",)
    writes_fields = ("checkpoint",)
    dispatch = "all"
    cadence = "save_freq"
    description = "Save model, optimizer and RNG state."

    def run(self, batch, ctx: StageContext):
        from rlflow.stages.impl.checkpoint import run_save_checkpoint

        return run_save_checkpoint(batch, ctx)
