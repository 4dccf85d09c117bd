"""The stage-kind registry: built-in kinds plus plugins from the ``rlflow.stages`` entry-point group.

The built-ins are named here and each module is imported on first lookup. It also answers by role
(``kinds_with_role``, ``builtin_kind``). Design notes: docs/design/registries.md.
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
BUILTIN_KINDS = {  # name -> "module:class"; a lookup imports only the kinds a pipeline uses
    "balance_batch": "rlflow.stages.balance_batch:BalanceBatch",
    "compute_values": "rlflow.stages.compute_values:ComputeValues",
    "generate": "rlflow.stages.generate:Generate",
    "group_filter": "rlflow.stages.group_filter:GroupFilter",
    "grpo_advantage": "rlflow.stages.grpo_advantage:GrpoAdvantage",
    "judge_score": "rlflow.stages.judge_score:JudgeScore",
    "old_log_prob": "rlflow.stages.old_log_prob:OldLogProb",
    "ref_log_prob": "rlflow.stages.ref_log_prob:RefLogProb",
    "reward_function": "rlflow.stages.reward_function:RewardFunction",
    "rm_score": "rlflow.stages.rm_score:RewardModelScore",
    "save_checkpoint": "rlflow.stages.save_checkpoint:SaveCheckpoint",
    "sync_weights": "rlflow.stages.sync_weights:SyncWeights",
    "teacher_log_prob": "rlflow.stages.teacher_log_prob:TeacherLogProb",
    "text2sql_reward": "rlflow.stages.text2sql_reward:Text2SqlReward",
    "update_actor": "rlflow.stages.update_actor:UpdateActor",
    "update_critic": "rlflow.stages.update_critic:UpdateCritic",
    "validate": "rlflow.stages.validation_metrics:Validate",
}
# the kind the compiler adds for a role the pipeline leaves implicit and the validator suggests for a missing one
BUILTIN_FOR_ROLE: dict[str, str] = {
    "advantage": "grpo_advantage",
    "balance": "balance_batch",
    "checkpoint": "save_checkpoint",
    "critic_update": "update_critic",
    "filter": "group_filter",
    "log_prob": "old_log_prob",
    "reference": "ref_log_prob",
    "reward": "text2sql_reward",
    "reward_model": "judge_score",
    "rollout": "generate",
    "teacher": "teacher_log_prob",
    "update": "update_actor",
    "validation": "validate",
    "values": "compute_values",
    "weight_sync": "sync_weights",
}
for _name, _target in BUILTIN_KINDS.items():
    STAGE_KINDS.register_lazy(_name, _target)


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
    """Class decorator for rlflow's own kinds: registered, and named in ``BUILTIN_KINDS`` (else no lookup finds it)."""
    if BUILTIN_KINDS.get(cls.name) != f"{cls.__module__}:{cls.__qualname__}":
        raise RegistryError(f"built-in stage kind {cls.name!r}: add it to BUILTIN_KINDS in {__name__}")
    return register_stage(cls)


def get_stage_kind(name: str) -> type[StageKind]:
    return STAGE_KINDS.get(name)


def builtin_kind(role: Role) -> type[StageKind]:
    """The built-in kind of ``role`` (KeyError for a role no built-in kind has)."""
    return STAGE_KINDS.get(BUILTIN_FOR_ROLE[role])


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
