"""``run_save_checkpoint``: every worker writes its rank's part of a checkpoint.

The runtime normally drives checkpoints itself (a temporary directory renamed into place
once every part is written, plus the data position); this stage is the same engine call for
a pipeline run stage by stage. The directory is ``ctx.state["checkpoint_dir"]`` when the
runtime set one, else ``<run_dir>/checkpoints/step_<N>``.
"""

from __future__ import annotations

from pathlib import Path

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.stages.base import StageContext


def run_save_checkpoint(batch: Batch, ctx: StageContext) -> Batch:
    target = ctx.state.get("checkpoint_dir")
    if target is None:
        if ctx.run_dir is None:
            raise StageError(f"step {ctx.step}, stage {ctx.stage_name!r}: no run directory to checkpoint into")
        target = Path(ctx.run_dir) / "checkpoints" / f"step_{ctx.step}"
    ctx.engine.save_checkpoint(str(target), ctx.step)
    return Batch()
