"""Stage kinds: one module each, registered by name. Importing this package registers the built-ins.

Only metadata is imported here (pure Python); each kind imports torch and friends inside ``run``.
"""

from rlflow.stages import (  # noqa: F401  (imported to register)
    generate,
    group_filter,
    grpo_advantage,
    old_log_prob,
    ref_log_prob,
    save_checkpoint,
    sync_weights,
    text2sql_reward,
    update_actor,
    validate,
)
from rlflow.stages.base import STATE_FIELDS, StageConfig, StageContext, StageKind
from rlflow.stages.registry import STAGE_KINDS, get_stage_kind, register_stage

__all__ = [
    "STAGE_KINDS",
    "STATE_FIELDS",
    "StageConfig",
    "StageContext",
    "StageKind",
    "get_stage_kind",
    "register_stage",
]
