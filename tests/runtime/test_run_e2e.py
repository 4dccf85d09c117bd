"""``rlflow run`` end to end on the CPU with real Ray: files, verl's order and names, exact resume."""

from __future__ import annotations

import pytest
import yaml
from runtime_helpers import REPO, SMALL, read_jsonl, rlflow, small_sets

from rlflow.check import load_pipeline
from rlflow.plan.compile import compile_plan
from rlflow.schemas.project import load_project_config

PIPELINE = str(REPO / "pipelines" / "bird_grpo.yaml")
# What changes from run to run on the same seed: wall-clock and memory measurements.
TWO_WORKERS = "resources.reward_pool.workers=2"  # the shipped pipeline has one: these runs shard the reward too
TWO_STEPS = ("trainer.total_steps=2", "trainer.save_freq=1", "trainer.test_freq=2", TWO_WORKERS)
NOISY = ("timing_s/", "timing_per_token_ms/", "perf/", "actor/perf/", "rollout/gen_seconds", "sync/seconds")


def deterministic(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(NOISY)}


@pytest.fixture(scope="module")
def two_step_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run") / "r"
    result = rlflow("run", PIPELINE, "--run-dir", str(run_dir), *small_sets(*TWO_STEPS))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_run_directory_holds_the_contract_files(two_step_run):
    run_dir = two_step_run
    resolved = yaml.safe_load((run_dir / "pipeline.resolved.yaml").read_text())
    assert resolved["trainer"]["total_steps"] == 2 and resolved["model"]["path"] == "builtin:tiny-qwen2"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_1", "step_2"]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    assert "val-core/bird/acc/mean@1" in metrics[0] and "val-core/bird/acc/mean@1" in metrics[2]
    for name in (
        "timing_s/gen",
        "timing_s/reward",
        "timing_s/old_log_prob",
        "timing_s/ref",
        "timing_s/adv",
        "timing_s/update_actor",
        "timing_s/save_checkpoint",
        "timing_s/update_weights",
        "timing_s/step",
        "critic/score/mean",
        "critic/advantages/mean",
        "response_length/mean",
        "prompt_length/mean",
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/entropy",
        "actor/kl_loss",
        "actor/grad_norm",
        "actor/lr",
        "perf/throughput",
        "timing_per_token_ms/gen",
        "training/global_step",
        "training/epoch",
        "reward/acc",
    ):
        assert name in metrics[1], name
    assert metrics[1]["training/global_step"] == 1


def test_trace_follows_the_plan_order(two_step_run):
    run_dir = two_step_run
    plan = compile_plan(load_pipeline(PIPELINE, [*SMALL, *TWO_STEPS], project=load_project_config(REPO)).spec)
    trace = read_jsonl(run_dir / "trace.jsonl")
    assert trace[0]["step"] == 0 and trace[0]["stage"] == "sync_weights", "weights reach the rollout before step 1"
    for step in (1, 2):
        stages = []
        for record in sorted((r for r in trace if r["step"] == step), key=lambda r: r["start"]):
            if not stages or stages[-1] != record["stage"]:
                stages.append(record["stage"])
        expected = [s.name for s in plan.step if s.cadence != "test_freq" or step == 2]  # test_freq=2
        assert stages == expected, f"step {step}: {stages}"
    for record in trace:
        assert {"step", "stage", "resource", "pid", "start", "end"} <= record.keys()
        assert record["end"] >= record["start"]
    assert len({r["pid"] for r in trace if r["resource"] == "reward_pool"}) == 2, "reward runs on both CPU workers"


def test_resume_is_exact(two_step_run, tmp_path):
    run_dir = two_step_run
    four = small_sets("trainer.total_steps=4", "trainer.save_freq=1", "trainer.test_freq=4", TWO_WORKERS)
    resumed = rlflow("run", PIPELINE, "--resume", str(run_dir), *four)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight_dir = tmp_path / "straight"
    straight = rlflow("run", PIPELINE, "--run-dir", str(straight_dir), *four)
    assert straight.returncode == 0, straight.stderr[-3000:]
    a = {m["step"]: deterministic(m) for m in read_jsonl(run_dir / "metrics.jsonl")}
    b = {m["step"]: deterministic(m) for m in read_jsonl(straight_dir / "metrics.jsonl")}
    assert sorted(a) == sorted(b) == [0, 1, 2, 3, 4]
    for step in (1, 3, 4):
        assert a[step] == b[step], f"step {step} differs after resume"
    training = {k: v for k, v in a[2].items() if not k.startswith(("val-core/", "val-aux/"))}
    assert training == {k: v for k, v in b[2].items() if not k.startswith(("val-core/", "val-aux/"))}


def test_resume_with_nothing_left_to_train_exits_non_zero(two_step_run):
    run_dir = two_step_run
    result = rlflow("run", PIPELINE, "--resume", str(run_dir), *small_sets(*TWO_STEPS, "trainer.total_steps=1"))
    assert result.returncode == 2
    assert "nothing to train" in result.stderr and "Traceback" not in result.stderr


def test_resume_with_a_changed_pipeline_is_refused(two_step_run):
    run_dir = two_step_run
    result = rlflow(
        "run",
        PIPELINE,
        "--resume",
        str(run_dir),
        *small_sets(*TWO_STEPS, "trainer.total_steps=9", "algorithm.clip_ratio=0.3"),
    )
    assert result.returncode == 2
    assert "algorithm.clip_ratio: 0.2 -> 0.3" in result.stderr and "--force" in result.stderr
