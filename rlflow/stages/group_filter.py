"""Stage ``group_filter``: drop prompt groups whose rewards do not vary (DAPO's dynamic sampling).

It keeps groups whose score standard deviation exceeds ``min_std``, never fewer than ``keep_at_least``.
Design notes: docs/design/stages.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from rlflow.errors import StageError
from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import builtin_stage

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from rlflow.batch import Batch


class GroupFilterConfig(StageConfig):
    min_std: float = Field(0.0, ge=0, description="Keep groups whose score std is greater than this.")
    keep_at_least: int = Field(1, ge=0, description="Never drop below this many groups (keeps the step alive).")


def group_ids(uids: list) -> tuple[torch.Tensor, int]:
    """Dense group index per row (groups numbered by first appearance) and the number of groups."""
    import torch

    index: dict = {}
    ids = [index.setdefault(uid, len(index)) for uid in uids]
    return torch.tensor(ids, dtype=torch.long), len(index)


def group_std(scores: torch.Tensor, ids: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Population std of ``scores`` per group, and each group's size."""
    import torch

    values = scores.detach().to("cpu", torch.float64).reshape(-1)  # one small copy; ids live on the CPU
    count = torch.zeros(groups, dtype=torch.float64).index_add_(0, ids, torch.ones_like(values))
    mean = torch.zeros(groups, dtype=torch.float64).index_add_(0, ids, values) / count
    squared = torch.zeros(groups, dtype=torch.float64).index_add_(0, ids, (values - mean[ids]) ** 2)
    return (squared / count).sqrt(), count


def select_groups(std: torch.Tensor, count: torch.Tensor, min_std: float, keep_at_least: int) -> torch.Tensor:
    """Boolean mask of kept groups: varied enough (or alone), topped up by the most varied others."""
    import torch

    keep = (std > min_std) | (count == 1)
    missing = min(keep_at_least, std.numel()) - int(keep.sum())
    if missing > 0:
        # Most varied first; a stable sort keeps batch order among equals (deterministic).
        candidates = torch.where(keep, torch.full_like(std, -1.0), std)
        order = torch.sort(candidates, descending=True, stable=True).indices
        keep[order[:missing]] = True
    return keep


@builtin_stage
class GroupFilter(StageKind):
    name = "group_filter"
    role = "filter"
    config_model = GroupFilterConfig
    reads_fields = ("scores", "uid")
    writes_fields = ()
    allowed_on = frozenset({"driver", "cpu"})
    dispatch = "driver"
    changes_rows = True
    description = "Drop groups with zero reward variance (dynamic sampling)."

    def run(self, batch: Batch, ctx: StageContext) -> Batch:
        """The rows of the groups kept, in their original order, with ``filter/*`` metrics."""
        import torch

        for field in self.reads_fields:
            if field not in batch:
                raise StageError(
                    f"stage '{ctx.stage_name}' (group_filter) needs batch field '{field}'; "
                    "place it after the reward stage, which writes 'scores'"
                )
        scores = batch["scores"]
        ids, groups = group_ids(batch["uid"])
        if scores.shape[0] != ids.shape[0]:
            raise StageError(f"stage '{ctx.stage_name}': 'scores' has {scores.shape[0]} rows, 'uid' has {ids.shape[0]}")
        if groups == 0:
            kept_batch = batch.index([])
            kept = 0
        else:
            std, count = group_std(scores, ids, groups)
            mask = select_groups(std, count, ctx.config.min_std, ctx.config.keep_at_least)
            kept = int(mask.sum())
            kept_batch = batch.index(torch.nonzero(mask[ids]).flatten().tolist())
        kept_batch.metrics.update(
            {
                "filter/kept_groups": float(kept),
                "filter/dropped_groups": float(groups - kept),
                "filter/kept_ratio": kept / groups if groups else 1.0,
            }
        )
        return kept_batch
