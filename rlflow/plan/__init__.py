"""The plan layer: a valid pipeline spec compiled into an immutable Plan, and its renderings.

Pure like rlflow.schemas: no torch, ray, verl or transformers; matplotlib only inside the timeline drawing.
Design notes: docs/design/plan.md.
"""

from rlflow.plan.compile import compile_plan, dataflow_problems
from rlflow.plan.model import DATA_SOURCE, RESUME, Edge, Placement, Plan, PlanStage

__all__ = ["DATA_SOURCE", "RESUME", "Edge", "Placement", "Plan", "PlanStage", "compile_plan", "dataflow_problems"]
