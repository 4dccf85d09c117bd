"""The models a step runs beside each other, by engine role: what each is, and what the runtime owes it.

A stage kind names the roles its worker needs (``StageKind.engine_roles``); a pool holds the union of
its stages' roles, one model per declared block. A new model is one entry here. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelRole:
    name: str  # the engine role stage kinds name
    block: str  # the pipeline block that declares its model: ``model`` (the policy), ``critic``, ...
    trainable: bool  # it has an optimizer: its weights and optimizer state are checkpointed
    checkpoint_part: str | None  # its folder in a checkpoint ("" the checkpoint's root); None: rebuilt on resume
    shares_weights_with: str | None = None  # a role whose weights it uses when both are on one worker (no copy)


MODEL_ROLES: dict[str, ModelRole] = {
    role.name: role
    for role in (
        ModelRole("actor", "model", True, ""),  # the policy being trained
        ModelRole("rollout", "model", False, None, "actor"),  # the policy sampling responses
        ModelRole("ref", "model", False, None),  # the frozen initial policy (KL)
        ModelRole("critic", "critic", True, "critic"),  # the value model (gae)
        ModelRole("reward_model", "reward_model", False, None),  # a sequence classifier scoring responses
        ModelRole("judge", "reward_model", False, None),  # a causal LM writing verdicts on responses
        ModelRole("teacher", "distillation", False, None),  # the teachers of on-policy distillation
    )
}


def models_of(roles) -> tuple[str, ...]:
    """The declared models a worker holding ``roles`` loads (a colocated pool may hold several), the policy first."""
    return tuple(dict.fromkeys(role.block for role in MODEL_ROLES.values() if role.name in roles))


def checkpointed(roles) -> tuple[str, ...]:
    """The roles among ``roles`` whose state a checkpoint holds."""
    return tuple(sorted(r for r in roles if r in MODEL_ROLES and MODEL_ROLES[r].checkpoint_part is not None))
