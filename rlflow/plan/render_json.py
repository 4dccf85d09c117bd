"""A Plan as JSON, for scripts and dashboards.

Keys keep the dataclass field names, so the JSON and the Python API read alike.
Design notes: docs/design/plan_render.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from rlflow.plan.model import Plan
from rlflow.plan.render_text import pool_models


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
        "resources": {
            name: {**_plain(p), "models": list(pool_models(plan, name))} for name, p in plan.resources.items()
        },
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
