"""Which engines a pipeline asks of its local pools, read off its stages by role.

A backend knows no stage kinds, so the runtime's worker and the validator both come here:
the first ``update`` stage's ``engine`` and ``zero_stage``, the first ``log_prob`` stage's
``engine`` and the first ``rollout`` stage's ``engine`` make an ``EngineChoice``, whose
``problem`` is the one rule about combining them. A kind whose config has no ``engine``
runs on the default (torch).
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
