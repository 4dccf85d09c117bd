"""A Plan as Graphviz DOT: what ``rlflow graph --render`` draws.

Design notes: docs/design/plan_render.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlflow.plan.model import DATA_SOURCE, Placement, Plan, PlanStage
from rlflow.plan.render_text import checkpoint_text, lane_name, models_text, placement_summary, staleness_text

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.schemas.pipeline import Pipeline

STAGE_STYLE = 'shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"'
CLUSTER_FILL = {"local": "#e8f0fe", "cpu": "#e6f4ea", "remote": "#fef7e0", "driver": "#f1f3f4"}


def quote(text: str) -> str:
    """A DOT string literal (escape backslashes and quotes; newlines become centred line breaks)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _stage_label(number: str, stage: PlanStage) -> str:
    timer = f"\n[{stage.verl_timer}]" if stage.verl_timer else ""
    notes = "" if stage.cadence in ("every_step", "init") else f"\n({stage.cadence})"
    return f"{number}. {stage.name}{timer}{notes}"


def _cluster(
    plan: Plan, name: str, placement: Placement, numbers: dict[str, int], spec: Pipeline | None = None
) -> list[str]:
    lane = f"{lane}: " if (lane := lane_name(plan, name)) else ""
    label = [lane + name, placement_summary(placement), models_text(plan, name, spec), checkpoint_text(plan, name)]
    lines = [
        f"  subgraph {quote('cluster_' + name)} {{",
        f"    label={quote(chr(10).join(filter(None, label)))};",
        f'    style="rounded,filled"; fillcolor="{CLUSTER_FILL[placement.type]}";',
    ]
    if placement.type == "remote":
        lines.append(
            f'    {quote(name + ":forwarder")} [shape=component, style=filled, fillcolor="#fff3c4", '
            f"label={quote(f'forwarder x{placement.forwarders}' + chr(10) + '(CPU only)')}];"
        )
    for stage in plan.step:
        if stage.resource == name:
            lines.append(f"    {quote(stage.name)} [label={quote(_stage_label(str(numbers[stage.name]), stage))}];")
    lines.append("  }")
    return lines


def _init_cluster(plan: Plan) -> list[str]:
    if not plan.init:
        return []
    lines = [f"  subgraph {quote('cluster_init')} {{", f"    label={quote('init (once)')}; style=dashed;"]
    for n, stage in enumerate(plan.init, 1):
        label = _stage_label(f"i{n}", stage) + f"\non {stage.resource}"
        lines.append(f"    {quote('init:' + stage.name)} [label={quote(label)}];")
    lines.append("  }")
    ids = [quote("init:" + s.name) for s in plan.init]
    lines += [f"  {a} -> {b};" for a, b in zip(ids, ids[1:])]
    if plan.step:
        lines.append(f"  {ids[-1]} -> {quote(plan.step[0].name)} [style=dotted, label={quote('step 1')}];")
    return lines


def _edges(plan: Plan) -> list[str]:
    lines = []
    stale = plan.staleness_edges()
    for edge in plan.edges:
        fields = list(edge.fields) + (["(next step)"] if edge.loop else [])
        if edge in stale:
            fields = [plan.staleness.describe(), f"({staleness_text(plan)})"]
            style = 'style="dashed,bold", color="#e37400", fontcolor="#e37400", constraint=false'
        elif edge.loop:
            style = 'style=dashed, color="#c5221f", fontcolor="#c5221f", constraint=false'
        elif edge.src == DATA_SOURCE:
            style = 'color="#9aa0a6", fontcolor="#5f6368"'
        else:
            style = ""
        attrs = ", ".join(filter(None, [f"label={quote(chr(10).join(fields))}", style]))
        lines.append(f"  {quote(edge.src)} -> {quote(edge.dst)} [{attrs}];")
    return lines


def render_dot(plan: Plan, spec: Pipeline | None = None) -> str:
    """``spec``, the pipeline ``plan`` was compiled from, names the models beside the policy."""
    numbers = {s.name: n for n, s in enumerate(plan.step, 1)}
    lines = [
        f"digraph {quote(plan.pipeline_name)} {{",
        '  rankdir=LR; compound=true; newrank=true; fontname="Helvetica";',
        f"  label={quote('pipeline ' + plan.pipeline_name)}; labelloc=t;",
        f"  node [{STAGE_STYLE}];",
        '  edge [fontname="Helvetica", fontsize=10];',
        f"  {quote(DATA_SOURCE)} [shape=cylinder, label={quote('data loader')}];",
    ]
    lines += _init_cluster(plan)
    for name, placement in plan.resources.items():
        lines += _cluster(plan, name, placement, numbers, spec)
    for name, placement in plan.resources.items():
        if placement.type == "remote":
            backend = quote(name + ":backend")
            lines.append(
                f'  {backend} [shape=box3d, style=filled, fillcolor="#fce8e6", '
                f"label={quote(f'remote backend {placement.backend!r}' + chr(10) + '(owns its GPUs)')}];"
            )
            lines.append(f"  {quote(name + ':forwarder')} -> {backend} [style=bold, label={quote('relays calls')}];")
    lines += _edges(plan)
    if plan.refill:
        label = quote("refill until the batch is full\n(algorithm.filter_groups)")
        first, last = quote(plan.refill[0]), quote(plan.refill[-1])
        lines.append(f'  {last} -> {first} [label={label}, style=dashed, color="#1a73e8", constraint=false];')
    lines.append("}")
    return "\n".join(lines) + "\n"
