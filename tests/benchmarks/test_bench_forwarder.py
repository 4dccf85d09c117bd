"""bench_forwarder at ``--quick`` sizes: both arms run ``rlflow run`` (local pool, remote backend through the
forwarder) and the forwarder's traffic is data only."""

from __future__ import annotations

from benchmarks import bench_forwarder


def test_both_arms_are_timed_and_the_forwarder_relays_data_only(run_bench):
    done, report = run_bench("forwarder")
    assert set(report["arms"]) == set(bench_forwarder.PIPELINES) and report["rounds"] == 1
    for name, arm in report["arms"].items():
        assert not arm["errors"], (name, arm["errors"])
        assert arm["step_s_median"] > 0 and arm["cpu_s_median"] > 0, name
        assert all(seconds >= 0 for seconds in arm["cpu_s_by_process_median"].values()), name
        (run,) = report["runs"][name]
        assert run["exit_code"] == 0 and len(run["step_s"]) == report["steps_per_run"], name
    assert "backend server" in report["arms"]["remote"]["cpu_s_by_process_median"]
    assert report["remote_over_local"] > 0
    traffic = report["traffic"]
    assert [s["step"] for s in traffic["per_step"]] == list(range(1, report["steps_per_run"] + 1))
    assert traffic["measured_over_payload"] > 1  # the tensors, plus the frames' headers and texts
    assert traffic["sync_bytes_max"] == 0  # the weight sync stays inside the backend
    assert traffic["bytes_per_step_median"] < report["parameter_bytes"] / 10
    assert [row["figure"].split(":")[0] for row in report["summary"]] == [
        "step time",
        "forwarder bytes per step (data only, zero weight bytes)",
    ]
    assert all(isinstance(row["met"], bool) for row in report["summary"])
    assert "remote / local:" in done.stdout
