"""bench_async's arithmetic (busy shares from a trace, ratios taken per round), and its local case at ``--quick``
sizes: the pipeline run for real in both trainer modes."""

from __future__ import annotations

from benchmarks import bench_async, common


def test_busy_shares_merge_overlapping_calls_and_leave_warm_up_steps_out():
    trace = [
        {"step": 1, "stage": "generate", "resource": "rollout", "start": 0.0, "end": 5.0},  # warm-up: left out
        {"step": 2, "stage": "generate", "resource": "rollout", "start": 10.0, "end": 14.0},
        {"step": 2, "stage": "old_log_prob", "resource": "actor", "start": 10.0, "end": 13.0},
        {"step": 2, "stage": "update_actor", "resource": "actor", "start": 12.0, "end": 18.0},  # overlaps the last
        {"step": 3, "stage": "generate", "resource": "rollout", "start": 16.0, "end": 20.0},
    ]
    assert common.busy_shares(trace, first_step=2) == {"actor": 0.8, "rollout": 0.8}


def test_the_ratio_is_taken_per_round_and_met_only_when_every_round_meets_it():
    runs = {
        "local/sync": [{"step_s": 4.0}, {"step_s": 5.0}, {"step_s": 4.0}],
        "local/separate_async": [{"step_s": 2.4}, {"step_s": 2.5}, {"step_s": 2.8}],
    }
    figures, row = bench_async.summarise("local", runs)
    assert figures["ratios"] == [0.6, 0.5, 0.7]
    assert figures["median_ratio"] == 0.6
    assert row["met"] is False, "one round missed 0.65x"
    assert "rounds 0.5-0.7" in row["measured_text"]


def test_the_local_case_runs_both_modes_and_measures_where_the_overlap_went(run_bench):
    done, report = run_bench("async", "--case", "local")
    assert set(report["runs"]) == {"local/sync", "local/separate_async"}
    for arm, (run,) in report["runs"].items():
        assert run["exit_code"] == 0 and "error" not in run, (arm, run.get("error"))
        assert len(run["steps_s"]) == report["steps_per_arm"] - bench_async.SKIP and run["step_s"] > 0, arm
        assert all(0 <= share <= 1 for share in run["busy_share"].values()), arm
        assert run["busy_share"]["actor_pool"] > 0 and run["busy_share"]["rollout_pool"] > 0, arm
    figures = report["figures"]["local"]
    assert figures["median_ratio"] == figures["ratios"][0] > 0
    (row,) = report["summary"]
    assert row["figure"].startswith("local: step time separate_async / sync") and isinstance(row["met"], bool)
    assert "| local |" in done.stdout
