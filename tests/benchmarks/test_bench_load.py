"""bench_load at ``--quick`` sizes: the goal's two arms (the default reservation, idle and beside a CPU burner) run
``rlflow run`` for real; the oversubscribed contrast's settings are checked to load, not run (two more Ray runs)."""

from __future__ import annotations

import pytest

from benchmarks import bench_load, common

GOAL_ARMS = ("default/idle", "default/loaded")


def test_the_default_reservation_is_timed_idle_and_beside_a_burner(run_bench):
    done, report = run_bench("load", "--arms", *GOAL_ARMS)
    assert set(report["runs"]) == set(GOAL_ARMS)
    for arm in GOAL_ARMS:
        (run,) = report["runs"][arm]
        assert run["exit_code"] == 0 and "error" not in run, (arm, run.get("error"))
        assert len(run["steps_s"]) == report["steps_per_arm"] - 1 and run["step_s"] > 0, arm
        assert report["step_s"][arm] == run["step_s"]
    assert report["step_s"]["oversubscribed/idle"] is None and report["loaded_over_idle"]["oversubscribed"] is None
    assert report["loaded_over_idle"]["default"] > 0
    goal, contrast = report["summary"]
    assert isinstance(goal["met"], bool) and goal["measured"] == report["loaded_over_idle"]["default"]
    assert contrast["met"] is None and contrast["measured"] is None
    assert "| default/loaded" in done.stdout


@pytest.mark.parametrize("reservation", sorted(bench_load.RESERVATIONS))
def test_every_reservation_loads_and_compiles(reservation):
    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan

    sets = [*bench_load.BASE_SETS, *common.QUICK_SETS, *bench_load.RESERVATIONS[reservation]]
    loaded = load_pipeline(common.ROOT / bench_load.PIPELINE, sets)
    compile_plan(loaded.spec)
    if reservation == "oversubscribed":
        resources = loaded.spec.resources
        assert resources["actor_pool"].cpus_per_worker == 2 and resources["reward_pool"].workers == 2
