"""The figures of the models-beside-the-policy benchmarks: the reward model's cost against the rule's, round by
round, with its pool's busy share; distillation judged on the share of the student-teacher gap each seed closes;
and the cost benchmark's whole path at its smallest size (two short Ray runs)."""

from __future__ import annotations

import pytest

from benchmarks import bench_learning, bench_reward_model, run_all


def test_the_reward_model_cost_is_a_per_round_ratio_with_the_pools_busy_share():
    runs = {
        "rule": [{"step_s": 2.0, "busy_share": {}}, {"step_s": 2.0, "busy_share": {}}],
        "reward_model": [
            {"step_s": 2.4, "busy_share": {"rm_pool": 0.2}},
            {"step_s": 2.8, "busy_share": {"rm_pool": 0.3}},
        ],
    }
    figures, (row,) = bench_reward_model.summarise(runs)
    assert figures["ratio"] == pytest.approx(1.3)  # the median of 1.2 and 1.4
    assert figures["rm_pool_busy_share"] == pytest.approx(0.25)
    assert row["met"] is False, "round 2 took 1.4x"
    assert "rm_pool busy 0.25" in row["measured_text"]


def test_distillation_is_judged_on_the_share_of_the_gap_closed():
    report = {
        "task": "ranking_distill",
        "pipeline": "pipelines/ranking_distill.yaml",
        "goal": {"min_delta": 0.0, "max_minutes": 15.0, "gap_fraction": 0.5, "teacher_acc": 0.7},
        "passed": True,
        "runs": [{"seed": 1, "before": 0.3, "after": 0.6, "wall_minutes": 4.0, "gap_closed": 0.75}],
    }
    (row,) = run_all.learning_rows(report)
    assert "closes 50% of the gap to the teacher (0.70)" in row["goal"]
    assert "seed 1: 0.30 -> 0.60 in 4 min (75% of the gap)" in row["measured_text"]
    assert "--task ranking_distill" in row["figure"]


def test_the_teacher_and_the_reward_models_figures_are_read_from_the_shipped_records():
    teacher = bench_learning.teacher_accuracy(bench_learning.TASKS["ranking_distill"].teacher)
    assert 0.0 < teacher <= 1.0
    beside = bench_learning.beside_figure(bench_learning.TASKS["ranking_rm"].beside)
    assert 0.5 < beside["value"] <= 1.0 and "agrees with the rule" in beside["label"]


def test_the_cost_benchmark_runs_both_arms_at_its_smallest_size(run_bench):
    _, report = run_bench("reward_model")
    assert set(report["runs"]) == {"rule", "reward_model"}
    for arm in report["runs"].values():
        assert arm[0]["exit_code"] == 0 and arm[0]["step_s"] > 0
    assert "rm_pool" in report["runs"]["reward_model"][0]["busy_share"]
    assert report["summary"][0]["measured"] > 0
