"""Rules for the critic: ``adv_estimator: gae`` needs its two stages, they need a critic to train, and the
trainer modes that cannot run one say so. Design notes: docs/design/critic.md.
"""

from __future__ import annotations

from rlflow.schemas.pipeline import Pipeline
from rlflow.schemas.subject import Reporter, Subject
from rlflow.stages import STAGE_KINDS

CRITIC_ROLES = {"values": "compute_values", "critic_update": "update_critic"}


def check_critic(subject: Subject, report: Reporter) -> None:
    if subject.algorithm is None:
        return
    estimator = subject.algorithm.adv_estimator
    enable = subject.spec.critic.enable if subject.spec is not None else None
    wanted = enable if enable is not None else estimator == "gae"
    found = {role: [(i, s) for i, s in subject.stages if _role(s.uses) == role] for role in CRITIC_ROLES}
    if enable is False and estimator == "gae":
        report(
            ("critic", "enable"),
            "adv_estimator gae computes its advantages from a critic's values; critic.enable is false",
            "remove enable: false, or pick an estimator without a critic (grpo, rloo, ...)",
        )
        return  # the stages are not the problem
    if wanted and subject.stages_complete:
        missing = [kind for role, kind in CRITIC_ROLES.items() if not found[role]]
        if missing:
            why = "enable is true, so the step trains a critic" if enable else "adv_estimator gae needs a critic"
            on = _actor_pool(subject) or "a pool of its own"
            report(
                ("critic", "enable") if enable else ("algorithm", "adv_estimator"),
                f"{why}, but no stage runs {' or '.join(missing)}",
                "add " + ", ".join(f"{{name: {k.removeprefix('compute_')}, uses: {k}, on: {on}}}" for k in missing),
            )
    if not wanted:
        setting, fix = (
            ("critic.enable unset", "")
            if enable is None
            else ("critic.enable false", "remove critic.enable: false and ")
        )
        for i, stage in (pair for pairs in found.values() for pair in pairs):
            report(
                ("stages", i, "uses"),
                f"stage {stage.name} trains or reads a critic, which this step does not have "
                f"(adv_estimator {estimator}, {setting})",
                f"remove the stage, or {fix}set algorithm.adv_estimator: gae",
            )
    _check_one_pool(subject, found, report)
    mode = subject.trainer.trainer_mode if subject.trainer is not None else "sync"
    if wanted and mode == "separate_async":
        report(
            ("trainer", "trainer_mode"),
            "trainer_mode separate_async does not train a critic yet: verl's separate-async trainer reruns values, "
            "advantage and both updates for each mini-batch (its parameter_sync_step cycles), with a critic the "
            "earlier cycles updated; rlflow's step computes the batch's values once",
            "set trainer_mode: sync for PPO with a critic",
        )


def _check_one_pool(subject: Subject, found: dict, report: Reporter) -> None:
    """The critic is one model, loaded on the pool its stages run on; no weights travel between two copies.
    Stages on a pool their kind refuses are reported by the stage rules."""
    pairs = [pair for pairs in found.values() for pair in pairs if subject.resource_type(pair[1].on) == "local"]
    pairs.sort(key=lambda pair: pair[0])
    if not pairs:
        return
    _, first = pairs[0]
    for i, stage in pairs[1:]:
        if stage.on != first.on:
            report(
                ("stages", i, "on"),
                f"stage {stage.name} runs the critic on {stage.on!r}, but {first.name} runs it on {first.on!r}: "
                "each pool would load a critic of its own, and the values would come from one the update never "
                "trains",
                f"bind {stage.name} to {first.on!r}",
            )


def fields_reported(spec: Pipeline) -> tuple[str, ...]:
    """The fields whose missing producer ``check_critic`` reports already, with its fix (``values``, when the
    step wants a critic and no stage computes them): the data-flow rule leaves them out."""
    wants = spec.uses_critic or spec.algorithm.adv_estimator == "gae"
    has_values = any(_role(s.uses) == "values" for s in spec.stages)
    return ("values",) if wants and not has_values else ()


def _role(uses: str) -> str | None:
    return STAGE_KINDS.get(uses).role if uses in STAGE_KINDS else None


def _actor_pool(subject: Subject) -> str | None:
    return next((s.on for _, s in subject.stages if _role(s.uses) == "update"), None)
