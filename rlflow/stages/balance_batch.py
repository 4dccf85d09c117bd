"""Stage ``balance_batch``: reorder the step's batch so each data-parallel worker of the actor gets as many tokens.

verl step 3 (``_balance_batch``), with verl's own partition functions and ``global_seqlen/*`` metrics.
Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlflow.errors import StageError
from rlflow.stages.base import StageContext, StageKind
from rlflow.stages.registry import actor_data_parallel_size, builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch


def balanced_partitions(seqlens: list[int], dp: int) -> list[list[int]]:
    """Row indices for each of ``dp`` workers, in worker order; worker ``r`` gets as many rows as the
    ``r``-th of ``dp`` contiguous shards of the batch holds."""
    import torch
    from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions

    rows = len(seqlens)
    padded = seqlens + [0] * (-rows % dp)
    workloads = calculate_workload(torch.tensor(padded, dtype=torch.int64)).tolist()
    real = [[i for i in part if i < rows] for part in get_seqlen_balanced_partitions(workloads, dp, equal_size=True)]
    shard_sizes = [(r + 1) * rows // dp - r * rows // dp for r in range(dp)]
    if sorted(map(len, real)) != sorted(shard_sizes):  # only rows of no tokens could mix with the placeholders
        raise StageError(f"balance_batch: partitions of {sorted(map(len, real))} rows do not fit shards {shard_sizes}")
    return [real.pop(next(j for j, part in enumerate(real) if len(part) == size)) for size in shard_sizes]


@builtin_stage
class BalanceBatch(StageKind):
    name = "balance_batch"
    role = "balance"
    # The masks give each row's tokens; the scores place the stage after the reward, where verl balances.
    reads_fields = ("prompt_mask", "response_mask", "token_level_scores")
    allowed_on = frozenset({"driver"})
    dispatch = "driver"
    changes_rows = True  # the same rows in another order: the runtime takes the batch whole
    description = "Reorder the batch so every data-parallel worker of the actor gets as many tokens (verl)."

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        from verl.utils.seqlen_balancing import log_seqlen_unbalance

        from rlflow.batch import response_span  # here: numpy, which a core install lacks
        from rlflow.metrics import SEQLEN_PREFIX

        dp = actor_data_parallel_size(ctx.pipeline)
        seqlens = (batch["prompt_mask"].sum(-1) + response_span(batch["response_mask"]).sum(-1)).tolist()
        partitions = balanced_partitions(seqlens, dp)
        out = batch.index([i for part in partitions for i in part])
        # verl's sums over dp contiguous chunks before balancing need a row count dp divides: the placeholders
        padded = seqlens + [0] * (-len(seqlens) % dp)
        out.metrics.update(log_seqlen_unbalance(seqlen_list=padded, partitions=partitions, prefix=SEQLEN_PREFIX))
        return out
