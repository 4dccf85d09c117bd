"""bench_startup at ``--quick`` sizes: a short ``rlflow run`` timed from the spawn to its first finished step with
its memory peaks, and TRL's arm beside it where ``.venv-trl`` exists (skipped with the reason otherwise)."""

from __future__ import annotations

import pytest

from benchmarks import common

TRL_MISSING = not common.TRL_PYTHON.exists()


@pytest.fixture(scope="module")
def startup(run_bench):
    return run_bench("startup")


def test_the_rlflow_run_reaches_its_first_step_and_its_memory_is_measured(startup):
    done, report = startup
    (run,) = report["runs"]["rlflow"]
    assert run["exit_code"] == 0 and "error" not in run
    assert 0 < run["ready_s"] <= run["first_step_start_s"] < run["first_step_end_s"] < run["wall_s"]
    assert run["cpu_s_to_first_step"] > 0 and run["cpu_s_by_process_to_first_step"]["driver"] > 0
    assert all(seconds >= 0 for seconds in run["cpu_s_by_process_to_first_step"].values())
    assert 0 < run["peak_pss_gib"] <= run["peak_rss_gib"]
    assert "ray::StageWorker" in run["peak_pss_by_group_mib"]
    memory = report["summary"][-1]
    assert memory["figure"].startswith("peak PSS") and memory["measured"] == run["peak_pss_gib"]
    assert isinstance(memory["met"], bool)
    assert "| rlflow |" in done.stdout


@pytest.mark.skipif(TRL_MISSING, reason=f"TRL's venv is not here ({common.TRL_PYTHON})")
def test_trl_reaches_its_first_step_beside_rlflow(startup):
    _, report = startup
    (run,) = report["runs"]["trl"]
    assert run["exit_code"] == 0 and "error" not in run, run.get("error")
    assert 0 < run["ready_s"] <= run["first_step_start_s"] < run["first_step_end_s"]
    assert run["cpu_s_to_first_step"] > 0 and run["peak_pss_gib"] > 0
    assert all(isinstance(row["met"], bool) for row in report["summary"])


@pytest.mark.skipif(not TRL_MISSING, reason="TRL's venv is here: its arm runs")
def test_without_trl_its_arm_says_how_to_install_it(startup):
    _, report = startup
    assert report["runs"]["trl"] == [{"skipped": report["arms"]["trl"]["skipped"]}]
    assert "scripts/setup_trl_venv.sh" in report["arms"]["trl"]["skipped"]
    assert [row["met"] for row in report["summary"][:2]] == [None, None]
