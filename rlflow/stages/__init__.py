"""Stage kinds: one module each, registered by name and found by role.

Importing this package names the built-ins; a kind's module is imported when it is first looked up
(``rlflow.stages.registry``). Only metadata is imported then (pure Python and pydantic); each kind
imports torch and friends inside ``run``.
"""

from rlflow.stages.base import STATE_FIELDS, Role, StageConfig, StageContext, StageKind
from rlflow.stages.registry import STAGE_KINDS, builtin_kind, get_stage_kind, kinds_with_role, register_stage

__all__ = [
    "STAGE_KINDS",
    "STATE_FIELDS",
    "Role",
    "StageConfig",
    "StageContext",
    "StageKind",
    "builtin_kind",
    "get_stage_kind",
    "kinds_with_role",
    "register_stage",
]
