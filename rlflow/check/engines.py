"""Which engines a pipeline asks of its local pools, read off its stages by role.

The runtime's worker and the validator both come here for an ``EngineChoice``. Design notes: docs/design/check.md.
"""

from __future__ import annotations

from typing import Any

from rlflow.backends.local.engine_choice import EngineChoice
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages import STAGE_KINDS

ROLES = ("update", "log_prob", "rollout")


def engine_choice_of(configs: dict[str, list[Any]]) -> EngineChoice:
    """The choice made by parsed stage configs, given per role in pipeline order."""
    first = {role: (configs.get(role) or [None])[0] for role in ROLES}
    return EngineChoice(
        training=getattr(first["update"], "engine", "torch"),
        zero_stage=getattr(first["update"], "zero_stage", 0),
        log_prob=getattr(first["log_prob"], "engine", "torch"),
        rollout=getattr(first["rollout"], "engine", "torch"),
    )


def engine_choice(pipeline: Pipeline) -> EngineChoice:
    """The engines of a valid ``pipeline``."""
    configs: dict[str, list[Any]] = {}
    for stage in pipeline.stages:
        kind = STAGE_KINDS.get(stage.uses)
        if kind.role in ROLES:
            configs.setdefault(kind.role, []).append(kind.parse_config(stage.with_))
    return engine_choice_of(configs)
