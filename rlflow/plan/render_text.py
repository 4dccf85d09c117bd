"""A Plan as plain text for the terminal: the init phase, the numbered step, the loops, the resources.

Plain aligned columns rather than rich tables: the output is stable (golden-tested), reads
the same in a pipe, a log or a CI job, and costs no import. ``placement_summary`` and
``CADENCE_TEXT`` are shared with the other renderers so every view names things alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlflow.plan.model import Placement, Plan, PlanStage
from rlflow.schemas.model_roles import MODEL_ROLES, checkpointed

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.schemas.pipeline import Pipeline

CADENCE_TEXT = {
    "every_step": "every step",
    "save_freq": "when trainer.save_freq hits",
    "test_freq": "when trainer.test_freq hits",
    "init": "once",
    "resume": "on resume",
}


DISPATCH_TEXT = {"shard": "rows split over workers", "all": "every worker", "driver": "whole batch, once"}


def where(stage: PlanStage) -> str:
    """``on actor_pool (local, rows split over workers)``; just ``on driver`` for the driver."""
    if stage.resource_type == "driver":
        return f"on {stage.resource}"
    return f"on {stage.resource} ({stage.resource_type}; {DISPATCH_TEXT[stage.dispatch]})"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _number(x: float) -> str:
    return f"{x:g}"


def placement_summary(p: Placement) -> str:
    """One line saying what a resource reserves, e.g. ``local, device auto, 2 workers x {CPU: 1}, PACK``."""
    if p.type == "driver":
        return "driver process"
    bundle = "{" + ", ".join(f"{k}: {_number(v)}" for k, v in p.bundles[0].items()) + "}" if p.bundles else "{}"
    if p.type == "remote":
        return f"remote backend '{p.backend}', {_plural(p.forwarders, 'forwarder')} x {bundle} (CPU only), {p.strategy}"
    device = f", device {p.device}" if p.type == "local" else ""
    if p.nnodes > 1:
        return (
            f"{p.type}{device}, {_plural(p.workers, 'worker')} on {p.nnodes} nodes x node bundle {bundle}, {p.strategy}"
        )
    return f"{p.type}{device}, {_plural(p.workers, 'worker')} x {bundle}, {p.strategy}"


def pool_models(plan: Plan, resource: str) -> tuple[str, ...]:
    """The declared models the workers of a local pool load (``model``, ``critic``); none for other resources
    (a remote backend loads its own)."""
    return plan.models(resource) if plan.resources[resource].type == "local" else ()


def models_text(plan: Plan, resource: str, spec: Pipeline | None = None) -> str:
    """``models: model, critic`` for a local pool, each model named where ``spec`` (the compiled pipeline)
    declares it; empty otherwise."""
    models = pool_models(plan, resource)
    return f"models: {', '.join(model_label(m, spec) for m in models)}" if models else ""


def model_label(block: str, spec: Pipeline | None) -> str:
    """A model block with what it loads: ``reward_model (builtin:tiny-rank-rm)``, ``distillation (teachers: t1,
    t2)``; the block's name alone without ``spec`` (the policy and critic are named by their blocks already)."""
    if spec is not None and block == "reward_model" and spec.reward_model.model_path:
        return f"reward_model ({spec.reward_model.model_path})"
    if spec is not None and block == "distillation" and spec.distillation.teacher_models:
        return f"distillation (teachers: {', '.join(spec.distillation.teacher_models)})"
    return block


def checkpoint_text(plan: Plan, resource: str) -> str:
    """What a pool holding a checkpointed model but not the checkpoint stage adds to each checkpoint (a critic on
    a pool of its own writes and reads the checkpoint's ``critic/``); empty otherwise."""
    here = []
    for stage in (*plan.step, *plan.init):
        others = plan.on_every_checkpointed_pool(stage)[1:] if stage.role in ("checkpoint", "resume") else ()
        if any(e.resource == resource for e in others) and stage.name not in here:
            here.append(stage.name)
    if not here:
        return ""
    parts = sorted(f"{MODEL_ROLES[r].checkpoint_part}/" for r in checkpointed(plan.engine_roles(resource)))
    return f"checkpoint: {' and '.join(here)} run here too, for the checkpoint's {', '.join(parts)}"


def _flow(stage: PlanStage) -> str:
    return f"{', '.join(stage.reads) or '-'} -> {', '.join(stage.writes) or '-'}"


def _stage_lines(label: str, stages: Sequence[PlanStage]) -> list[str]:
    """Two lines a stage: number, name, timer, where and when; then what it reads and writes."""
    rows = []
    for i, s in enumerate(stages, 1):
        notes = CADENCE_TEXT[s.cadence] + (", implicit" if s.implicit else "")
        timer = f"[{s.verl_timer}]" if s.verl_timer else ""
        rows.append([f"{label}{i}.", s.name, timer, where(s), notes])
    if not rows:
        return ["  (nothing)"]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = []
    for row, stage in zip(rows, stages):
        cells = [row[0].rjust(widths[0])] + [cell.ljust(widths[c]) for c, cell in enumerate(row[1:], 1)]
        lines.append(("  " + "  ".join(cells)).rstrip())
        lines.append(" " * (4 + widths[0]) + _flow(stage))
    return lines


def lane_name(plan: Plan, resource: str) -> str:
    """``rollout lane`` or ``trainer lane`` for those resources of an async plan; empty otherwise."""
    if not plan.is_async:
        return ""
    roles = {s.role for s in plan.step if s.resource == resource}
    return "rollout lane" if "rollout" in roles else "trainer lane" if "update" in roles else ""


def staleness_text(plan: Plan) -> str:
    """``max_off_policy_threshold 2 (wait), 1 warmup batch``: the bound of an async plan."""
    bound = plan.staleness
    if bound is None:
        return ""
    warmup = _plural(bound.num_warmup_batches, "warmup batch").replace("batchs", "batches")
    return f"max_off_policy_threshold {bound.max_off_policy_threshold} ({bound.max_off_policy_strategy}), {warmup}"


def _async_lines(plan: Plan) -> list[str]:
    """The staleness edge, the lanes, and what may run at once within a step and across two steps."""
    lines = [
        f"  staleness: {e.src} --{plan.staleness.describe()}--> {e.dst} ({staleness_text(plan)})"
        for e in plan.staleness_edges()
    ]
    lanes = plan.lanes()
    width = max(len(name) for name in lanes)
    lines += ["", f"lanes ({plan.trainer_mode}: the rollout of step t+1 runs while step t trains)"]
    for name, names in lanes.items():
        lane = lane_name(plan, name)
        lines.append(f"  {name.ljust(width)}  {lane + ': ' if lane else ''}{', '.join(names)}")
    lines += ["", "at once within a step (| between resources; stages on one resource run one at a time)"]
    resource = {s.name: s.resource for s in plan.step}
    for group in plan.groups:
        if len({resource[n] for n in group}) > 1:
            by_resource = dict.fromkeys(resource[n] for n in group)
            parts = [", ".join(n for n in group if resource[n] == r) for r in by_resource]
            lines.append(f"  {' | '.join(parts)}")
    lines += ["", "step t+1 beside step t"]
    lines += [f"  {name} (t+1) beside {', '.join(beside)} (t)" for name, beside in plan.overlap]
    return lines


def render_text(plan: Plan, spec: Pipeline | None = None) -> str:
    """``spec``, the pipeline ``plan`` was compiled from, names the models beside the policy."""
    lines = [f"pipeline {plan.pipeline_name}", "", "init (once, before step 1; load_checkpoint only on resume)"]
    lines += _stage_lines("i", plan.init)
    lines += ["", "step (every training step, in this order)"]
    lines += _stage_lines("", plan.step)
    if plan.refill:
        lines.append(
            f"  refill: {' -> '.join(plan.refill)} again on new prompts until the batch is full "
            "(algorithm.filter_groups: groups whose metric does not vary are dropped)"
        )
    for edge in plan.loop_edges():
        lines.append(f"  loop: {edge.src} --{', '.join(edge.fields)}--> {edge.dst} of the next step")
    if plan.is_async:
        lines += _async_lines(plan)
    lines += ["", "resources"]
    width = max((len(name) for name in plan.resources), default=0)
    for name, placement in plan.resources.items():
        lines.append(f"  {name.ljust(width)}  {placement_summary(placement)}")
        indent = f"  {' ' * width}    "
        lines += [indent + text for text in (models_text(plan, name, spec), checkpoint_text(plan, name)) if text]
        if placement.stages:
            shared = "colocated: " if len(placement.stages) > 1 and placement.type != "driver" else ""
            lines.append(f"{indent}{shared}{', '.join(placement.stages)}")
        else:
            lines.append(f"{indent}(no stages)")
    return "\n".join(lines) + "\n"
