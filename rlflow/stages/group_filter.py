"""Stage ``group_filter``: drop prompt groups whose rewards do not vary (DAPO's dynamic sampling).

A group whose samples all score the same has zero GRPO advantage and teaches nothing. This
stage reads ``scores`` and ``uid`` and keeps only groups with reward variance, so the
compiler places it right after the reward, before the log-prob stages. It is also the
worked example of a stage kind placed by what it reads and writes.
"""

from __future__ import annotations

from pydantic import Field

from rlflow.stages.base import StageConfig, StageContext, StageKind
from rlflow.stages.registry import register_stage


class GroupFilterConfig(StageConfig):
    min_std: float = Field(0.0, ge=0, description="Keep groups whose score std is greater than this.")
    keep_at_least: int = Field(1, ge=0, description="Never drop below this many groups (keeps the step alive).")


@register_stage
class GroupFilter(StageKind):
    name = "group_filter"
    config_model = GroupFilterConfig
    reads_fields = ("scores", "uid")
    writes_fields = ()
    allowed_on = frozenset({"driver", "cpu"})
    dispatch = "driver"
    changes_rows = True
    description = "Drop groups with zero reward variance (dynamic sampling)."

    def run(self, batch, ctx: StageContext):
        from rlflow.stages.impl.filters import run_group_filter

        return run_group_filter(batch, ctx)
