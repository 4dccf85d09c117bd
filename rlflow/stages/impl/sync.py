"""``run_sync_weights``: the rollout serves the actor's new weights from the next generation on.

On every worker of the actor's pool: a colocated engine shares its tensors (``sync/bytes`` = 0)
and only records the policy version. A rollout on another pool receives the weights from the
runtime (``export_weights`` -> ``load_rollout_weights``), which reports the bytes moved.
"""

from __future__ import annotations

from rlflow.batch import Batch
from rlflow.stages.base import StageContext


def run_sync_weights(batch: Batch, ctx: StageContext) -> Batch:
    return Batch(metrics=dict(ctx.engine.update_weights(ctx.step)))
