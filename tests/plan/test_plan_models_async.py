"""Under separate_async the reward model and the teachers run in the trainer lane, beside the log-prob passes
(as verl launches its reward computation asynchronously): no order between them, only the data."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlflow.check import load_pipeline
from rlflow.plan.compile import compile_plan

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
ASYNC = [
    "trainer.trainer_mode=separate_async",
    "resources.rollout_pool.type=local",
    "resources.rollout_pool.cpus_per_worker=0.5",
    "stages.generate.on=rollout_pool",
]


@pytest.mark.parametrize(
    ("pipeline", "stage"), [("ranking_rm.yaml", "rm_score"), ("ranking_distill.yaml", "teacher_log_prob")]
)
def test_the_extra_model_runs_beside_the_log_prob_passes(pipeline, stage):
    plan = compile_plan(load_pipeline(PIPELINES / pipeline, ASYNC).spec)
    level = next(group for group in plan.groups if stage in group)
    assert "old_log_prob" in level  # the same level: neither waits for the other
    waits = dict(plan.waits)
    assert stage not in waits["old_log_prob"] and "old_log_prob" not in waits[stage]
    assert waits[stage] == ("generate",)
