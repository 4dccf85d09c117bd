"""What may run at once: the step's concurrent groups and, in an async mode, the overlap of two steps.

Both are derived from the compiled step, as small rules over one dependency relation.
Design notes: docs/design/plan.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from graphlib import TopologicalSorter

from rlflow.plan.model import ASYNC_MODES, Edge, PlanStage

ACTOR_WEIGHTS = "actor_weights"
ACTOR_ENGINE = "actor"  # stages running the actor's engine read the weights the last update wrote


def step_dependencies(step: Sequence[PlanStage], edges: Sequence[Edge]) -> dict[str, set[str]]:
    """Stage -> the stages of the same step it must wait for (data, weights, row barriers)."""
    deps: dict[str, set[str]] = {s.name: set() for s in step}
    for edge in edges:
        if not edge.loop and edge.src in deps and edge.dst in deps:
            deps[edge.dst].add(edge.src)
    for i, stage in enumerate(step):
        if stage.changes_rows:  # stages after it see its rows, stages before it must be done with theirs
            for before in step[:i]:
                deps[stage.name].add(before.name)
            for after in step[i + 1 :]:
                deps[after.name].add(stage.name)
    return deps


BARRIER_ROLES = ("rollout", "checkpoint", "weight_sync", "validation")  # what the step loop runs alone


def step_waits(step: Sequence[PlanStage], edges: Sequence[Edge], mode: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(stage, the earlier stages of its step it waits for before it starts), in step order.

    In ``sync`` every earlier stage: one after another, as PPOTrainerSync. In an async mode what the stage
    depends on (``step_dependencies``), except around a barrier (a stage that changes rows, or of a role the
    loop runs alone: ``BARRIER_ROLES``), which waits for every earlier stage and every later stage waits for.
    """
    names = [s.name for s in step]
    if mode not in ASYNC_MODES:
        return tuple((name, tuple(names[:i])) for i, name in enumerate(names))
    deps = step_dependencies(step, edges)
    barriers: list[str] = []
    out = []
    for i, stage in enumerate(step):
        if stage.role in BARRIER_ROLES or stage.changes_rows:
            waits = set(names[:i])
            barriers.append(stage.name)
        else:
            waits = deps[stage.name] | set(barriers)
        out.append((stage.name, tuple(n for n in names[:i] if n in waits)))
    return tuple(out)


def step_groups(step: Sequence[PlanStage], edges: Sequence[Edge]) -> tuple[tuple[str, ...], ...]:
    """The step's stages in levels, each in step order: a stage depends only on stages of earlier levels."""
    sorter = TopologicalSorter(step_dependencies(step, edges))
    sorter.prepare()
    position = {s.name: i for i, s in enumerate(step)}
    groups = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=position.__getitem__)
        groups.append(tuple(ready))
        sorter.done(*ready)
    return tuple(groups)


def cross_step_waits(
    step: Sequence[PlanStage], edges: Sequence[Edge], mode: str
) -> tuple[set[str], dict[str, set[str]]]:
    """What a stage of step t+1 waits for in step t, directly, as (the stages that wait for every stage of
    step t on their resource, since a resource runs the steps in order; stage -> the other stages it waits
    for: loop edges into it, the update before the actor's next passes). Each stage waits for its own
    step-t run too. In an async mode the rollout reached by the weight edge waits only for its own previous
    run: it may sample with older weights, within the staleness bound."""
    relaxed = {e.dst for e in edges if mode in ASYNC_MODES and e.weights_only}
    updaters = {s.name for s in step if ACTOR_WEIGHTS in s.writes}
    extra = {s.name: set(updaters) if ACTOR_ENGINE in s.engine_roles and s.name not in relaxed else set() for s in step}
    for e in edges:
        if e.loop and e.dst not in relaxed and e.dst in extra:
            extra[e.dst].add(e.src)
    return {s.name for s in step} - relaxed, extra


def cross_step_overlap(
    step: Sequence[PlanStage], edges: Sequence[Edge], mode: str
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(stage of step t+1, the stages of step t it may run beside), for the stages that may run beside any.

    B of step t+1 may run beside A of step t when they are on different resources and no chain of
    dependencies leads from A (step t) to B (step t+1): none of B's ancestors in its step waits for a
    stage of step t that A leads to. Empty in ``sync`` mode. O(stages^2) set work.
    """
    if mode not in ASYNC_MODES:
        return ()
    deps = step_dependencies(step, edges)
    ancestors: dict[str, set[str]] = {}  # itself and what it waits for in its step (step order is topological)
    for s in step:
        ancestors[s.name] = {s.name}.union(*(ancestors[d] for d in deps[s.name]))
    in_order, extra = cross_step_waits(step, edges, mode)
    resource = {s.name: s.resource for s in step}
    held_on: dict[str, set[str]] = {}  # resource -> the step-t stages leading to any of its stages
    for s in step:
        held_on.setdefault(s.resource, set()).update(ancestors[s.name])
    out = []
    for later in step:
        mine = ancestors[later.name]  # each of these waits for its own step-t run, and so for its ancestors
        sources = {a for b in mine for a in extra[b]} - mine
        held = set(mine).union(
            *(held_on[r] for r in {resource[b] for b in mine if b in in_order}),
            *(ancestors[a] for a in sources),
        )
        beside = tuple(s.name for s in step if s.resource != later.resource and s.name not in held)
        if beside:
            out.append((later.name, beside))
    return tuple(out)
