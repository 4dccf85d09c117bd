"""The step loop over the in-process executor: the runtime's own loop and phases, no Ray.

Two steps of the shipped pipeline at small sizes, with every role-driven phase on: the weight
sync and validation at init, a checkpoint (the stage writes, the runtime commits) and
validation every step. A run resumed from step 1's checkpoint must log step 2 exactly as the
uninterrupted run did.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runtime_helpers import NOISY, REPO, SMALL, train_in_process

from rlflow.runtime import checkpoints

SETS = [
    *SMALL,
    "trainer.total_steps=2",
    "trainer.save_freq=1",
    "trainer.test_freq=1",
    "data.max_val_samples=4",
    "trainer.val_before_train=true",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the runs here are bit-compared


def run_loop(run_dir: Path, resume: Path | None = None) -> list[dict]:
    return train_in_process(REPO / "pipelines" / "bird_grpo.yaml", SETS, run_dir, resume)


def test_two_steps_with_every_phase_and_an_exact_resume(tmp_path):
    metrics = run_loop(tmp_path / "a")
    assert [m["step"] for m in metrics] == [0, 1, 2]  # validation before training, then two steps
    assert any(k.startswith("val-core/") for k in metrics[0])
    for m in metrics[1:]:
        assert {"timing_s/gen", "timing_s/update_actor", "timing_s/save_checkpoint", "timing_s/testing"} <= set(m)
        assert any(k.startswith("val-core/") for k in m) and "actor/pg_loss" in m
    ckpts = tmp_path / "a" / "checkpoints"
    assert checkpoints.latest(ckpts).name == "step_2"
    assert (ckpts / "step_1" / "rank_0" / "model" / "model.safetensors").exists()  # written by the stage's run

    trace = [json.loads(line) for line in (tmp_path / "a" / "trace.jsonl").read_text().splitlines()]
    step1 = [r["stage"] for r in trace if r["step"] == 1]
    assert step1 == [
        "generate",
        "reward",
        "old_log_prob",
        "ref_log_prob",
        "advantage",
        "update_actor",
        "save_checkpoint",
        "sync_weights",
        "validate",
        "validate",
        "validate",
    ]  # rollout, reward, metrics

    resumed = run_loop(tmp_path / "b", resume=ckpts / "step_1")
    assert [m["step"] for m in resumed] == [2]
    same = {k for k in metrics[2] if not k.startswith(NOISY)}
    assert {k: resumed[0][k] for k in same} == {k: metrics[2][k] for k in same}


class BrokenSink:
    """A logger whose server goes away at step 1."""

    name = "broken"

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.closed = False

    def log(self, step: int, metrics: dict) -> None:
        if step == 1:
            raise ConnectionError("server went away")
        self.steps.append(step)

    def close(self) -> None:
        self.closed = True


def test_a_sink_that_fails_mid_run_is_dropped_and_training_goes_on(tmp_path, caplog):
    broken, sinks = BrokenSink(), []
    sinks.append(broken)
    with caplog.at_level("WARNING", logger="rlflow.runtime"):
        metrics = train_in_process(
            REPO / "pipelines" / "bird_grpo.yaml", [*SMALL, "trainer.total_steps=2"], tmp_path / "run", sinks=sinks
        )
    assert [m["step"] for m in metrics] == [0, 1, 2], "every step trained and written"
    assert broken.steps == [0] and broken.closed and sinks == []
    (warning,) = [r.getMessage() for r in caplog.records if "broken" in r.getMessage()]
    assert "failed at step 1 (ConnectionError: server went away)" in warning and "metrics.jsonl" in warning


def test_a_checkpoint_commits_only_after_its_steps_metrics_are_logged(tmp_path, monkeypatch):
    """A failure after step 2's checkpoint stage but before its metrics are logged (the async run's final wait
    for weight pushes, once) must not leave a committed step 2 that metrics.jsonl lacks: the checkpoint stays
    uncommitted, the run resumes from step 1 and logs step 2 exactly once."""
    from rlflow.runtime.run_dir import RunDir
    from rlflow.runtime.step_loop import StepLoop

    real = StepLoop.finish_step

    def fail_at_step_2(self, batch, record):
        if record.step == 2:
            raise RuntimeError("lost the backend after the checkpoint")
        return real(self, batch, record)

    run_dir = tmp_path / "run"
    monkeypatch.setattr(StepLoop, "finish_step", fail_at_step_2)
    with pytest.raises(RuntimeError, match="lost the backend"):
        run_loop(run_dir)
    ckpts = run_dir / "checkpoints"
    assert checkpoints.latest(ckpts).name == "step_1"
    assert not list(ckpts.glob(".tmp-*")), "the uncommitted checkpoint is removed"
    assert [m["step"] for m in read_records(run_dir)] == [0, 1]
    monkeypatch.setattr(StepLoop, "finish_step", real)
    RunDir(run_dir).truncate_metrics_after(1)  # what `rlflow run` does before resuming
    run_loop(run_dir, resume=checkpoints.latest(ckpts))
    assert [m["step"] for m in read_records(run_dir)] == [0, 1, 2]
    assert checkpoints.latest(ckpts).name == "step_2"


def read_records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
