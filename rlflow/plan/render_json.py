"""A Plan as JSON, for scripts and dashboards.

Shape: ``{"pipeline", "init": [...], "stages": [...], "resources": {...}, "edges": [...]}``, with
``refill`` (DAPO's dynamic-sampling loop: the stages repeated until the batch is full) when there is one.
``stages`` is an ordered list (the step order), each entry carrying at least ``name``, ``kind``,
``resource``, ``reads``, ``writes``, ``cadence`` and ``verl_timer``; the rest of each PlanStage
and Placement rides along so that nothing the plan knows is lost. Keys keep the dataclass
field names, so the JSON and the Python API read alike. An async plan adds ``trainer_mode``,
``lanes``, ``groups`` (what may run at once within a step), ``overlap`` (stage of step t+1 ->
the stages of step t it may run beside) and ``staleness`` (the bound); a sync plan's JSON is
as it always was.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from rlflow.plan.model import Plan


def _plain(value: Any) -> Any:
    """Dataclasses, read-only mappings and tuples as JSON-ready dicts and lists."""
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, frozenset):
        return sorted(_plain(v) for v in value)
    return value


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    data = {
        "pipeline": plan.pipeline_name,
        "init": _plain(plan.init),
        "stages": _plain(plan.step),
        "resources": _plain(plan.resources),
        "edges": _plain(plan.edges),
    }
    if plan.refill:
        data["refill"] = list(plan.refill)
    if plan.is_async:
        data |= {
            "trainer_mode": plan.trainer_mode,
            "lanes": _plain(plan.lanes()),
            "groups": _plain(plan.groups),
            "overlap": {name: list(beside) for name, beside in plan.overlap},
            "staleness": _plain(plan.staleness),
        }
    return data


def render_json(plan: Plan) -> str:
    return json.dumps(plan_to_dict(plan), indent=2) + "\n"
