"""Stage kinds: one module each, registered by name and found by role. Importing this package registers the built-ins.

Only metadata is imported here (pure Python and pydantic); each kind imports torch and friends inside ``run``.
"""

from rlflow.stages import (  # noqa: F401  (imported to register)
    balance_batch,
    compute_values,
    generate,
    group_filter,
    grpo_advantage,
    judge_score,
    old_log_prob,
    ref_log_prob,
    reward_function,
    rm_score,
    save_checkpoint,
    sync_weights,
    teacher_log_prob,
    text2sql_reward,
    update_actor,
    update_critic,
    validation_metrics,
)
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
