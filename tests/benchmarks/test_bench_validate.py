"""bench_validate runs at ``--quick`` sizes (one timed run of each command) as ``python -m benchmarks.bench_validate`` runs it."""

from __future__ import annotations

from benchmarks import bench_validate


def test_validate_is_timed_cold_and_set_beside_verl(run_bench):
    done, report = run_bench("validate")
    for key in ("rlflow_validate", "rlflow_validate_dont_write_bytecode"):
        timing = report[key]
        assert timing["exit_code"] == 0 and timing["runs"] == 1, key
        assert timing["wall_median_s"] > 0 and timing["cpu_median_s"] > 0, key
    assert report["rlflow_validate"]["modules_imported"] > 0
    assert report["rlflow_validate"]["heavy_modules_imported"] == []
    missing = bench_validate.verl_missing()
    if missing:  # the verl arm needs verl (the train extra) in this interpreter
        assert report["verl_config_error"] == {"skipped": missing}
        assert f"verl: skipped, {missing}" in done.stdout and "speedup_wall_median" not in report
    else:
        verl = report["verl_config_error"]
        assert verl["exit_code"] != 0 and verl["wall_median_s"] > 0 and "batch" in verl["message"]
        assert report["speedup_wall_median"] > 0
