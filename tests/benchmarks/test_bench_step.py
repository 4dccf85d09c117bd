"""bench_step at ``--quick`` sizes, every arm in one run as ``python -m benchmarks.bench_step`` runs it: ``rlflow run``
(Ray), the in-process loop, and TRL's GRPOTrainer where ``.venv-trl`` exists (skipped with the reason otherwise)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks import bench_step, common

TRL_MISSING = not common.TRL_PYTHON.exists()
STEPS = 2  # none skipped as warm-up at this size


@pytest.fixture(scope="module")
def arms(run_bench):
    _, report = run_bench("step", "--steps", str(STEPS))
    assert list(report["arms"]) == list(bench_step.ARMS) and report["rounds"] == 1
    return report


@pytest.mark.parametrize("arm", ["rlflow", "loop"])
def test_the_rlflow_run_and_the_loop_time_every_step(arms, arm):
    figures = arms["arms"][arm]
    assert not figures["errors"] and figures["samples"] == STEPS and figures["skipped"] is None
    assert figures["step_s_median"] > 0 and figures["cpu_s_median"] > 0
    assert {"gen", "reward", "update_actor"} <= set(figures["stage_s_median"])
    assert figures["response_length_mean"] > 0
    assert all(seconds >= 0 for seconds in figures["cpu_s_by_process_median"].values())


def test_rlflow_is_set_beside_the_loop_round_by_round(arms):
    assert arms["ratios"]["rlflow_over_loop"] > 0 and len(arms["ratios"]["rlflow_over_loop_per_round"]) == 1
    loop_row = arms["summary"][0]
    assert loop_row["figure"].startswith("rlflow run step time / plain in-process loop")
    assert isinstance(loop_row["met"], bool)


@pytest.mark.skipif(TRL_MISSING, reason=f"TRL's venv is not here ({common.TRL_PYTHON})")
def test_trl_times_every_step_beside_rlflow(arms):
    figures = arms["arms"]["trl"]
    assert not figures["errors"] and figures["skipped"] is None and figures["samples"] == STEPS
    assert figures["step_s_median"] > 0 and figures["cpu_s_median"] > 0
    assert arms["ratios"]["rlflow_over_trl"] > 0 and isinstance(arms["summary"][1]["met"], bool)


@pytest.mark.skipif(not TRL_MISSING, reason="TRL's venv is here: its arm runs")
def test_without_trl_its_arm_says_how_to_install_it(arms):
    figures = arms["arms"]["trl"]
    assert figures["samples"] == 0 and not figures["errors"]
    assert "scripts/setup_trl_venv.sh" in figures["skipped"]
    trl_row = arms["summary"][1]
    assert trl_row["met"] is None and trl_row["note"] == figures["skipped"]


def test_the_trl_arms_rlflow_side_runs_without_trl():
    """What trl_grpo_run takes from rlflow (the pipeline's sizes, the sampler's prompt order, the SQL reward) works
    in rlflow's venv, so a change there fails here too, not only where TRL is installed."""
    from transformers import AutoTokenizer

    from benchmarks import trl_grpo_run

    model_dir, _ = common.bench_model_dir()
    sets = [*common.STEP_SETS, *common.QUICK_SETS]
    spec = trl_grpo_run.load_spec(
        SimpleNamespace(pipeline=common.ROOT / bench_step.PIPELINE, model_dir=str(model_dir), sets=sets)
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    rows = trl_grpo_run.ordered_rows(spec, common.ROOT, tokenizer, STEPS)
    assert len(rows) == STEPS * spec.trainer.train_batch_size and all(row["prompt"] for row in rows)
    reward = trl_grpo_run.sql_reward_function()
    columns = {"db_path": [row["db_path"] for row in rows], "gold_sql": [row["gold_sql"] for row in rows]}
    gold = [f"```sql\n{row['gold_sql']}\n```" for row in rows]
    assert reward(None, gold, **columns) == [1.0] * len(rows)
    assert reward(None, ["no SQL here"] * len(rows), **columns) == [0.0] * len(rows)
