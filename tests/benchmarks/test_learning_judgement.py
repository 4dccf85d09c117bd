"""Learning judged beyond its noise: the standard errors of bench_learning's figures, the goal judged on the mean
of the last three validations on every seed, the rows and pictures run_all makes of them, and validation splits
large enough for a standard error of at most 2.5 points."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest

from benchmarks import bench_learning, common, run_all

CURVE = {0: 0.30, 10: 0.37, 20: 0.38, 80: 0.46, 90: 0.45, 100: 0.44}  # one seed's validations by step


def test_after_is_the_mean_of_the_last_three_validations_with_conservative_errors():
    figures = bench_learning.judge(CURVE, 400)
    assert figures["after_steps"] == [80, 90, 100]
    assert figures["after"] == pytest.approx(0.45) and figures["delta"] == pytest.approx(0.15)
    assert figures["before_se"] == pytest.approx(math.sqrt(0.30 * 0.70 / 400))
    # the three validations score the same questions: the error of one validation at their mean, not a third of it
    assert figures["after_se"] == pytest.approx(math.sqrt(0.45 * 0.55 / 400))
    assert figures["delta_se"] == pytest.approx(math.hypot(figures["before_se"], figures["after_se"]))
    short = bench_learning.judge({0: 0.3, 2: 0.5}, 8)  # --quick: one validation after step 0
    assert short["after_steps"] == [2] and short["after"] == 0.5


def test_400_questions_give_any_accuracy_a_standard_error_of_at_most_two_and_a_half_points():
    assert max(bench_learning.standard_error(k / 400, 400) for k in range(401)) <= 0.025
    assert bench_learning.standard_error(0.5, 100) == pytest.approx(0.05)


def seed(curve: dict[int, float], **figures) -> dict:
    return {**bench_learning.judge(curve, 400), "wall_minutes": 8.0, **figures}


def test_the_goal_is_judged_on_the_last_three_validations_and_float_rounding_does_not_miss_it():
    assert bench_learning.meets_goal(seed(CURVE), 0.15, 15.0, False, False), "0.45 - 0.30 is 0.15, up to rounding"
    lucky = seed({0: 0.30, 80: 0.38, 90: 0.40, 100: 0.46})  # the last one alone rose 16 points, the mean 11
    assert not bench_learning.meets_goal(lucky, 0.15, 15.0, False, False)
    assert not bench_learning.meets_goal(seed(CURVE, wall_minutes=16.0), 0.15, 15.0, False, False)
    assert not bench_learning.meets_goal(seed(CURVE, gap_closed=0.4), 0.0, 15.0, False, True)
    assert not bench_learning.meets_goal(seed(CURVE, num_turns_mean_by_step=[2.0, 1.0]), 0.15, 15.0, True, False)


def report(runs: list[dict], **goal) -> dict:
    return {
        "task": "bird",
        "pipeline": "pipelines/bird_grpo.yaml",
        "goal": {"min_delta": 0.15, "max_minutes": 15.0, **goal},
        "passed": True,
        "runs": runs,
    }


def with_curve(figures: dict, curve: dict[int, float]) -> dict:
    return {"seed": 1, "cpu_minutes": 8.0, "val_acc_by_step": {str(k): v for k, v in curve.items()}, **figures}


def test_a_row_shows_each_figure_with_its_standard_error_and_says_how_the_goal_is_judged():
    result = report([with_curve(seed(CURVE), CURVE)], after="mean of the last 3 validations")
    (row,) = run_all.learning_rows(result)
    assert row["measured_text"] == "seed 1: 0.30 ± 0.023 -> 0.45 ± 0.025 (+15.0 ± 3.4 points) in 8 min"
    assert row["goal"] == "+15 points, judged on the mean of the last 3 validations against the first, within 15 min"
    assert "| 1 | 0.30 ± 0.023 | 0.45 ± 0.025 | +15.0 ± 3.4 | 400 |" in bench_learning.table(result["runs"])


def test_an_older_result_without_errors_is_shown_as_before():
    old = {"seed": 1, "before": 0.3, "after": 0.44, "delta": 0.14, "wall_minutes": 8.0, "cpu_minutes": 8.2}
    (row,) = run_all.learning_rows(report([old]))
    assert row["measured_text"] == "seed 1: 0.30 -> 0.44 in 8 min"
    assert row["goal"] == "+15 points within 15 min"
    assert "| 1 | 0.30 | 0.44 | +14 | n/a |" in bench_learning.table([old])


def test_the_curves_are_drawn_with_a_band_of_one_standard_error(tmp_path, monkeypatch):
    runs = [with_curve(seed(CURVE), CURVE), {**with_curve(seed(CURVE), CURVE), "seed": 2}]
    axes = bench_learning.picture(report(runs)).axes[0]
    assert len(axes.collections) == 2 and len(axes.lines) == 2, "one band per seed"
    unsized = [{k: v for k, v in run.items() if k != "val_n"} for run in runs]
    assert not bench_learning.picture(report(unsized)).axes[0].collections, "no size recorded: no band"
    monkeypatch.setattr(run_all, "PAGE", tmp_path / "benchmarks.md")
    section = "\n".join(run_all.learning_section(report(runs)))
    assert "(val_curves_bird.png)" in section and "at most 2.5 points" in section
    drawn = (tmp_path / "val_curves_bird.png").read_bytes()
    (tmp_path / "val_curves_bird.png").unlink()
    run_all.learning_section(report(runs))
    assert (tmp_path / "val_curves_bird.png").read_bytes() == drawn, "drawn from the result file alone"


@pytest.mark.parametrize(
    "pipeline", sorted(p.relative_to(common.ROOT).as_posix() for p in (common.ROOT / "pipelines").glob("*.yaml"))
)
def test_every_shipped_pipeline_validates_on_at_least_400_questions(pipeline):
    from rlflow.check import load_pipeline

    if load_pipeline(common.ROOT / pipeline).spec.data.val is None:
        pytest.skip("no validation split")
    assert bench_learning.validation_size(pipeline, []) >= 400


def test_the_teachers_accuracy_is_measured_on_the_whole_validation_split():
    teacher = bench_learning.TASKS["ranking_distill"].teacher
    measured = json.loads((common.ROOT / teacher / "warm_start.json").read_text())["greedy_acc"]["dev"]
    assert measured["questions"] == pq.read_metadata(common.ROOT / "rlflow/assets/data/ranking/val.parquet").num_rows
