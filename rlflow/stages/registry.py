"""The stage-kind registry: built-in kinds plus plugins from the ``rlflow.stages`` entry-point group.

It also answers by role (``kinds_with_role``, ``builtin_kind``). Design notes: docs/design/registries.md.
"""

from __future__ import annotations

from typing import get_args

from rlflow.errors import RegistryError
from rlflow.registry import Registry
from rlflow.schemas.model_roles import MODEL_ROLES
from rlflow.schemas.pipeline import Pipeline, data_parallel_size
from rlflow.stages.base import Role, StageKind

STAGE_KINDS: Registry[type[StageKind]] = Registry(
    "stage kind",
    "rlflow.stages",
    "Plugins add stage kinds through the `rlflow.stages` entry-point group or a module listed under "
    "`plugins:` in rlflow.yaml.",
)
_BUILTIN_FOR_ROLE: dict[str, type[StageKind]] = {}


def register_stage(cls: type[StageKind]) -> type[StageKind]:
    """Class decorator: register a StageKind subclass under its ``name``; its role must be a known one."""
    if getattr(cls, "role", None) not in get_args(Role):
        raise RegistryError(
            f"stage kind {getattr(cls, 'name', cls)!r}: role {getattr(cls, 'role', None)!r} is not one of "
            f"{', '.join(get_args(Role))} (set the class attribute `role`)"
        )
    unknown = sorted(set(getattr(cls, "engine_roles", ())) - set(MODEL_ROLES))
    if unknown:
        raise RegistryError(
            f"stage kind {getattr(cls, 'name', cls)!r}: engine_roles {unknown} are not model roles; "
            f"known: {', '.join(MODEL_ROLES)}"
        )
    STAGE_KINDS.register(cls.name, cls)
    return cls


def builtin_stage(cls: type[StageKind]) -> type[StageKind]:
    """Class decorator for rlflow's own kinds: registered, and the built-in answer for its role."""
    _BUILTIN_FOR_ROLE.setdefault(cls.role, cls)
    return register_stage(cls)


def get_stage_kind(name: str) -> type[StageKind]:
    return STAGE_KINDS.get(name)


def builtin_kind(role: Role) -> type[StageKind]:
    """The built-in kind of ``role`` (KeyError for a role no built-in kind has)."""
    return _BUILTIN_FOR_ROLE[role]


def kinds_with_role(role: Role) -> list[str]:
    """Names of every registered kind of ``role``."""
    return [name for name in STAGE_KINDS.names() if STAGE_KINDS.get(name).role == role]


def actor_data_parallel_size(pipeline: Pipeline) -> int:
    """The data-parallel workers of the resource the ``update`` stage trains on (1 without one): verl's actor dp."""
    for stage in pipeline.stages:
        if stage.uses in STAGE_KINDS and STAGE_KINDS.get(stage.uses).role == "update":
            resource = pipeline.resources.get(stage.on)
            return data_parallel_size(resource) if resource is not None else 1
    return 1
