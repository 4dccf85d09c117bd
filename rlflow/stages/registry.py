"""The stage-kind registry: built-in kinds plus plugins from the ``rlflow.stages`` entry-point group."""

from __future__ import annotations

from rlflow.registry import Registry

STAGE_KINDS: Registry = Registry(
    "stage kind",
    "rlflow.stages",
    "Plugins add stage kinds through the `rlflow.stages` entry-point group or a module listed under "
    "`plugins:` in rlflow.yaml.",
)


def register_stage(cls):
    """Class decorator: register a StageKind subclass under its ``name``."""
    STAGE_KINDS.register(cls.name, cls)
    return cls


def get_stage_kind(name: str):
    return STAGE_KINDS.get(name)
