"""Compile a valid pipeline spec into a Plan: the init phase, the ordered step, resources, edges.

Design notes: docs/design/compile.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rlflow.errors import ConfigError, Diagnostic
from rlflow.plan.concurrency import cross_step_overlap, step_groups, step_waits
from rlflow.plan.dataflow import Flow, FlowNode, Problem, analyse, data_edges
from rlflow.plan.model import ASYNC_MODES, RESUME, FrozenDict, Plan, PlanStage, Staleness, frozen_mapping
from rlflow.plan.placement import build_placements
from rlflow.schemas.pipeline import DRIVER, Pipeline, StageSpec
from rlflow.stages.base import StageKind
from rlflow.stages.registry import STAGE_KINDS, actor_data_parallel_size, builtin_kind, get_stage_kind

ACTOR_WEIGHTS = "actor_weights"  # its producer hosts checkpoints (save and load)
RESPONSES = "responses"  # its producer hosts the implicit validation
ROLLOUT_WEIGHTS = "rollout_weights"  # its producer is the weight sync, run at init too


@dataclass(frozen=True)
class _Stage:
    """A declared or implicit stage with its kind resolved."""

    spec: StageSpec
    kind: type[StageKind]
    node: FlowNode
    implicit: bool = False


def dataflow_problems(spec: Pipeline) -> list[Problem]:
    """(dotted path, message) for every data-flow problem of ``spec``; empty when it compiles.

    Stages of unknown kinds are skipped (the validator reports them); while any is unknown,
    missing producers are not reported, since the unknown stage may be the producer.
    """
    return _analyse(spec)[2].problems


def compile_plan(spec: Pipeline) -> Plan:
    """The Plan of a valid pipeline; ``ConfigError`` listing every data-flow problem otherwise."""
    unknown = [
        Diagnostic("", 0, 0, f"stages[{i}].uses", STAGE_KINDS.unknown(s.uses))
        for i, s in enumerate(spec.stages)
        if s.uses not in STAGE_KINDS
    ]
    candidates, stages, flow = _analyse(spec)
    if unknown or flow.problems:
        raise ConfigError(unknown + [Diagnostic("", 0, 0, path, message) for path, message in flow.problems])
    ordered = [stages[i] for i in flow.order]
    sampling = rollout_sampling(spec)
    step = tuple(_entry(spec, s, s.kind.cadence, sampling) for s in ordered)
    init = tuple(_init_phase(spec, ordered, candidates))
    edges = data_edges([s.node for s in stages], flow.order, flow.producer)
    mode = spec.trainer.trainer_mode
    return Plan(
        pipeline_name=spec.name,
        init=init,
        step=step,
        resources=build_placements(spec, (*step, *init)),
        edges=edges,
        trainer_mode=mode,
        waits=step_waits(step, edges, mode),
        groups=step_groups(step, edges),
        overlap=cross_step_overlap(step, edges, mode),
        staleness=_staleness(spec) if mode in ASYNC_MODES else None,
        refill=_refill(spec, step),
    )


def _staleness(spec: Pipeline) -> Staleness:
    t = spec.trainer
    return Staleness(t.max_off_policy_threshold, t.max_off_policy_strategy, t.num_warmup_batches)


def _refill(spec: Pipeline, step: tuple[PlanStage, ...]) -> tuple[str, ...]:
    """With dynamic sampling, the step's stages up to its last reward: what generates and scores a group."""
    rewards = [i for i, s in enumerate(step) if s.role == "reward"]
    if not spec.algorithm.filter_groups.enable or not rewards:
        return ()
    return tuple(s.name for s in step[: rewards[-1] + 1])


def _analyse(spec: Pipeline) -> tuple[list[_Stage], list[_Stage], Flow]:
    """All known stages (declared and implicit), those that run every step, and their flow."""
    declared, all_known = _declared(spec)
    candidates = declared + _implicit(spec, declared)
    stages = [s for s in candidates if _runs(spec, s.kind)]
    flow = analyse([s.node for s in stages], _ProducerIndex(), report_missing=all_known)
    return candidates, stages, flow


def _declared(spec: Pipeline) -> tuple[list[_Stage], bool]:
    stages: list[_Stage] = []
    all_known = True
    for index, stage in enumerate(spec.stages):
        if stage.uses not in STAGE_KINDS:
            all_known = False
            continue
        kind = STAGE_KINDS.get(stage.uses)
        stages.append(_Stage(stage, kind, _node(spec, stage, kind, f"stages[{index}]")))
    return stages, all_known


def _runs(spec: Pipeline, kind: type[StageKind]) -> bool:
    """Whether a stage of this kind runs in the step under this pipeline's settings."""
    if kind.cadence == "save_freq":
        return spec.trainer.save_freq > 0
    if kind.cadence == "test_freq":
        return spec.trainer.test_freq > 0 and spec.data.val is not None
    if kind.role == "reference":
        return spec.algorithm.uses_reference
    if kind.role == "log_prob":
        return not spec.algorithm.rollout_correction.bypass_mode
    if kind.role == "balance":
        return _balances(spec)
    return True


def _balances(spec: Pipeline) -> bool:
    return spec.trainer.balance_batch and actor_data_parallel_size(spec) > 1


def _node(spec: Pipeline, stage: StageSpec, kind: type[StageKind], path: str, origin: str = "") -> FlowNode:
    return FlowNode(
        name=stage.name,
        path=path,
        reads=tuple(kind.reads(spec, stage)),
        writes=tuple(kind.writes(spec, stage)),
        verl_timer=kind.verl_timer,
        origin=origin,
    )


def _implicit(spec: Pipeline, declared: list[_Stage]) -> list[_Stage]:
    """The checkpoint, validation and balance stages verl runs even when the pipeline does not declare them."""
    added: list[_Stage] = []
    taken = {s.name for s in spec.stages}
    roles = {s.kind.role for s in declared}
    actor, rollout = _producer_of(declared, ACTOR_WEIGHTS), _producer_of(declared, RESPONSES)
    dp = actor_data_parallel_size(spec)
    wanted = [  # (role, where it runs, whether it runs, why it is added)
        ("checkpoint", actor and actor.spec.on, spec.trainer.save_freq > 0, "added because trainer.save_freq > 0"),
        ("validation", rollout and rollout.spec.on, _validates(spec), "added because data.val is set"),
        ("balance", DRIVER, _balances(spec), f"added because trainer.balance_batch and the actor's {dp} workers"),
    ]
    for role, on, needed, origin in wanted:
        if not needed or role in roles or on is None:
            continue
        kind = builtin_kind(role)
        stage = StageSpec(name=_free_name(kind.name, taken), uses=kind.name, on=on)
        taken.add(stage.name)
        added.append(_Stage(stage, kind, _node(spec, stage, kind, "stages", origin), implicit=True))
    return added


def _validates(spec: Pipeline) -> bool:
    return spec.data.val is not None and (spec.trainer.test_freq > 0 or spec.trainer.val_before_train)


def _producer_of(stages: list[_Stage], field: str) -> _Stage | None:
    return next((s for s in stages if field in s.node.writes), None)


def _free_name(base: str, taken: set[str]) -> str:
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def _init_phase(spec: Pipeline, ordered: list[_Stage], candidates: list[_Stage]) -> Iterator[PlanStage]:
    """verl's start-up: load a checkpoint on resume, sync weights, then validate if asked."""
    actor = _producer_of(ordered, ACTOR_WEIGHTS)
    if actor is not None:
        yield PlanStage(
            name=RESUME, kind=RESUME, role="resume", verl_timer=None, resource=actor.spec.on,
            resource_type=_resource_type(spec, actor.spec.on), dispatch="all", cadence="resume",
            reads=(), writes=(ACTOR_WEIGHTS,), timeout_s=spec.trainer.stage_timeout_s, implicit=True,
            engine_roles=frozenset({"actor"}),
        )  # fmt: skip
    sync = _producer_of(ordered, ROLLOUT_WEIGHTS)
    if sync is not None:
        yield _entry(spec, sync, "init")
    if spec.trainer.val_before_train and spec.data.val is not None:
        # The validation stage runs at init even when test_freq keeps it out of the step.
        yield from (_entry(spec, s, "init") for s in candidates if s.kind.cadence == "test_freq")


def rollout_sampling(spec: Pipeline) -> FrozenDict:
    """The sampling settings of the pipeline's rollout, whichever kind it is (its ``StageKind.sampling``):
    resolved once here, handed to the stages that declare ``needs_sampling``; empty without a rollout."""
    for stage in spec.stages:
        kind = get_stage_kind(stage.uses)
        if kind.role == "rollout":
            return frozen_mapping(kind.sampling(spec, stage))
    return FrozenDict()


def _entry(spec: Pipeline, stage: _Stage, cadence: str, sampling: FrozenDict | None = None) -> PlanStage:
    return PlanStage(
        name=stage.spec.name,
        kind=stage.spec.uses,
        role=stage.kind.role,
        verl_timer=stage.kind.verl_timer,
        resource=stage.spec.on,
        resource_type=_resource_type(spec, stage.spec.on),
        dispatch=stage.kind.dispatch,
        cadence=cadence,
        reads=stage.node.reads,
        writes=stage.node.writes,
        timeout_s=stage.spec.timeout_s or spec.trainer.stage_timeout_s,
        config=frozen_mapping(stage.kind.parse_config(stage.spec.with_).model_dump()),
        implicit=stage.implicit,
        engine_roles=stage.kind.engine_roles,
        changes_rows=stage.kind.changes_rows,
        sampling=sampling if stage.kind.needs_sampling and sampling else FrozenDict(),
    )


def _resource_type(spec: Pipeline, name: str) -> str:
    if name == DRIVER:
        return DRIVER
    resource = spec.resources.get(name)
    if resource is None:
        known = ", ".join([*spec.resources, DRIVER])
        raise ConfigError(
            [
                Diagnostic(
                    "",
                    0,
                    0,
                    "stages",
                    f"unknown resource {name!r}",
                    f"declare it under `resources:` or use one of: {known}",
                )
            ]
        )
    return resource.type


class _ProducerIndex:
    """Registered kinds by the fields they declare they write (for missing-producer hints).

    Built on first use per analysis, so that kinds registered later (plugins, tests) count.
    """

    def __init__(self) -> None:
        self._index: dict[str, list[str]] | None = None

    def __call__(self, field: str) -> list[str]:
        if self._index is None:
            self._index = {}
            for name in STAGE_KINDS.names():
                for written in STAGE_KINDS.get(name).writes_fields:
                    self._index.setdefault(written, []).append(name)
        return self._index.get(field, [])
