"""A Plan as a Mermaid flowchart (pastes into Markdown on GitHub, GitLab and most wikis).

Design notes: docs/design/plan_render.md.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rlflow.plan.model import DATA_SOURCE, Plan
from rlflow.plan.render_text import lane_name, models_text, placement_summary, staleness_text

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.schemas.pipeline import Pipeline


def _id(prefix: str, name: str) -> str:
    return prefix + re.sub(r"[^A-Za-z0-9_]", "_", name)


def _label(text: str) -> str:
    return '"' + text.replace('"', "#quot;") + '"'


def _stage_node(prefix: str, number: str, stage) -> str:
    timer = f"<br/>[{stage.verl_timer}]" if stage.verl_timer else ""
    return f"{_id(prefix, stage.name)}[{_label(f'{number}. {stage.name}{timer}')}]"


def render_mermaid(plan: Plan, spec: Pipeline | None = None) -> str:
    """``spec``, the pipeline ``plan`` was compiled from, names the models beside the policy."""
    lines = ["flowchart LR", f"  {_id('d_', DATA_SOURCE)}[({_label('data loader')})]"]
    if plan.init:
        lines.append(f"  subgraph init[{_label('init (once)')}]")
        lines += [f"    {_stage_node('i_', f'i{n}', s)}" for n, s in enumerate(plan.init, 1)]
        lines.append("  end")
    numbers = {s.name: n for n, s in enumerate(plan.step, 1)}
    for name, placement in plan.resources.items():
        lane = f"{lane}: " if (lane := lane_name(plan, name)) else ""
        title = "<br/>".join(
            filter(None, [f"{lane}{name}: {placement_summary(placement)}", models_text(plan, name, spec)])
        )
        lines.append(f"  subgraph {_id('r_', name)}[{_label(title)}]")
        lines += [f"    {_stage_node('s_', str(numbers[s.name]), s)}" for s in plan.step if s.resource == name]
        lines.append("  end")
    init_ids = [_id("i_", s.name) for s in plan.init]
    lines += [f"  {a} --> {b}" for a, b in zip(init_ids, init_ids[1:])]
    if init_ids and plan.step:
        lines.append(f"  {init_ids[-1]} -.->|{_label('step 1')}| {_id('s_', plan.step[0].name)}")
    links = sum(1 for line in lines if "-->" in line or "-.->" in line)  # Mermaid numbers links from 0
    stale = plan.staleness_edges()
    for edge in plan.edges:
        src = _id("d_", edge.src) if edge.src == DATA_SOURCE else _id("s_", edge.src)
        fields = ", ".join(edge.fields) + (" (next step)" if edge.loop else "")
        if edge in stale:
            fields = f"{plan.staleness.describe()} ({staleness_text(plan)})"
        arrow = "-.->" if edge.loop else "-->"
        lines.append(f"  {src} {arrow}|{_label(fields)}| {_id('s_', edge.dst)}")
    lines += [f"  linkStyle {links + plan.edges.index(e)} stroke:#e37400,stroke-width:2px" for e in stale]
    if plan.refill:
        label = _label("refill until the batch is full")
        lines.append(f"  {_id('s_', plan.refill[-1])} -.->|{label}| {_id('s_', plan.refill[0])}")
    return "\n".join(lines) + "\n"
