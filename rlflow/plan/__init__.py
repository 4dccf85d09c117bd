"""The plan layer: a valid pipeline spec compiled into an immutable Plan, and its renderings.

    compile_plan(spec) -> Plan          rlflow.plan.compile (order from data dependencies)
    step groups, cross-step overlap     rlflow.plan.concurrency (what may run at once; async modes)
    dataflow_problems(spec)             the validator's data-flow rules, as (path, message)
    render_text / render_mermaid / render_dot / render_json, render_graphviz (dot binary)
    timeline: trace.jsonl -> per-stage and per-resource summary and a Gantt chart

Pure like rlflow.schemas: no torch, ray, verl or transformers; matplotlib only inside the
timeline drawing function.
"""

from rlflow.plan.compile import compile_plan, dataflow_problems
from rlflow.plan.model import DATA_SOURCE, RESUME, Edge, Placement, Plan, PlanStage

__all__ = ["DATA_SOURCE", "RESUME", "Edge", "Placement", "Plan", "PlanStage", "compile_plan", "dataflow_problems"]
