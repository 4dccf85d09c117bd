"""bench_reward at ``--quick`` sizes: rlflow's reward pools of 1 and 2 Ray workers score the benchmark's response mix
through the runtime's executor, cold and warm."""

from __future__ import annotations

import pytest

from benchmarks import bench_reward


def test_both_pools_score_the_mix_as_it_was_built(run_bench):
    done, report = run_bench("reward")
    rows = report["questions"] * len(bench_reward.MIX)
    assert report["questions"] == 4 and report["rows_per_call"] == rows and report["rounds"] == 1
    share = {kind: bench_reward.MIX.count(kind) / len(bench_reward.MIX) for kind in set(bench_reward.MIX)}
    assert report["reward_metrics"] == pytest.approx(
        {
            "reward/acc": share["correct"],
            "reward/error_rate": share["error_syntax"] + share["error_table"],
            "reward/format_ok": 1 - share["no_sql"],
            "reward/timeout_rate": 0.0,
        }
    )
    assert set(report["arms"]) == {"workers_1", "workers_2"}
    for name, arm in report["arms"].items():
        for call in [arm["cold"], *arm["calls"]]:
            assert call["rows"] == rows and call["metrics"] == report["reward_metrics"], name
            assert call["seconds"] > 0 and 0 < call["worker_s"] <= call["seconds"], name
        assert len(arm["calls"]) == 1 and arm["rewards_per_s_median"] > 0, name
    assert report["scaling_2_over_1"] > 0 and report["worker_scaling_2_over_1"] > 0
    (row,) = report["summary"]
    assert row["figure"].startswith("SQL rewards/s, 2 workers / 1 worker") and isinstance(row["met"], bool)
    assert "scaling 2 workers / 1 worker:" in done.stdout
