"""Stage ``save_checkpoint``: model, optimizer and RNG state of every worker (verl [save_checkpoint]).

Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlflow.errors import StageError
from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


@builtin_stage
class SaveCheckpoint(StageKind):
    name = "save_checkpoint"
    role = "checkpoint"
    engine_roles = frozenset({"actor"})
    verl_timer = "save_checkpoint"
    reads_fields = ("actor_weights",)
    writes_fields = ("checkpoint",)
    dispatch = "all"
    cadence = "save_freq"
    description = "Save model, optimizer and RNG state."

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        from rlflow.batch import Batch

        target = ctx.checkpoint_dir
        if target is None:
            if ctx.run_dir is None:
                raise StageError(f"step {ctx.step}, stage {ctx.stage_name!r}: no run directory to checkpoint into")
            target = str(Path(ctx.run_dir) / "checkpoints" / f"step_{ctx.step}")
        ctx.engine.save_checkpoint(target, ctx.step)
        return Batch()
