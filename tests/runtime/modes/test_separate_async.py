"""The separate_async trainer mode over the in-process executor (one thread per resource, no Ray).

The shipped BIRD pipeline at small sizes with its rollout moved to a pool of its own: the
next step's batch is sampled while a step trains, every batch's staleness stays within the
bound under both strategies, and a run resumed from a checkpoint (which saves the batch in
flight) logs the same steps as a straight run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from runtime_helpers import NOISY, REPO, SMALL, train_in_process

from rlflow.runtime import checkpoints

ASYNC = [
    *SMALL,
    "data.max_val_samples=4",
    "resources.rollout_pool={type: local, device: cpu, cpus_per_worker: 1}",
    "stages.generate.on=rollout_pool",
    "trainer.trainer_mode=separate_async",
    "trainer.max_off_policy_threshold=2",
    "trainer.max_off_policy_strategy=wait",
]
STALENESS = "training/off_policy/trajectory_staleness/max"


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run_loop(run_dir: Path, sets: list[str], resume: Path | None = None) -> list[dict]:
    return train_in_process(REPO / "pipelines" / "bird_grpo.yaml", [*ASYNC, *sets], run_dir, resume)


def trace(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]


def test_the_next_batch_is_sampled_while_a_step_trains_within_the_bound(tmp_path):
    metrics = run_loop(tmp_path / "a", ["trainer.total_steps=3", "trainer.val_before_train=false"])
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert [m[STALENESS] for m in metrics] == [0.0, 1.0, 1.0]  # step 1 sampled by version 0, then one behind
    assert all(m["training/off_policy/trajectory_spans/max"] == 1.0 for m in metrics)
    assert [m["rollout/policy_version"] for m in metrics] == [0.0, 0.0, 1.0]
    records = trace(tmp_path / "a")
    gen2 = next(r for r in records if r["stage"] == "generate" and r["step"] == 2)
    update1 = next(r for r in records if r["stage"] == "update_actor" and r["step"] == 1)
    trains1 = min(r["start"] for r in records if r["step"] == 1 and r["resource"] == "actor_pool")
    # step 2's rollout runs while step 1 trains (its log-prob passes and update), however short either is
    assert gen2["start"] < update1["end"] and gen2["end"] > trains1, "step 2's rollout overlaps step 1's training"
    assert {r["resource"] for r in records if r["stage"] == "generate"} == {"rollout_pool"}


@pytest.mark.parametrize(
    ("strategy", "warmup", "threshold"),
    [("wait", 2, 2), ("drop", 2, 2), ("wait", 1, 1)],
)
def test_the_staleness_bound_is_never_exceeded(tmp_path, strategy, warmup, threshold):
    metrics = run_loop(
        tmp_path / "a",
        [
            "trainer.total_steps=4",
            "trainer.val_before_train=false",
            f"trainer.max_off_policy_strategy={strategy}",
            f"trainer.num_warmup_batches={warmup}",
            f"trainer.max_off_policy_threshold={threshold}",
        ],
    )
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert max(m[STALENESS] + 1 for m in metrics) <= threshold  # spans = staleness + 1
    evicted = sum(m.get("training/off_policy/evicted_samples", 0) for m in metrics)
    if strategy == "drop":  # sampled two ahead, a batch would span 3 versions: dropped and sampled again
        assert evicted > 0
        assert all(m.get("training/off_policy/evicted_samples_staleness/min", 3) == 3 for m in metrics)
    else:
        assert evicted == 0


def test_an_async_run_resumes_exactly_with_the_batch_in_flight(tmp_path):
    sets = ["trainer.total_steps=4", "trainer.save_freq=2", "trainer.val_before_train=false"]
    straight = run_loop(tmp_path / "a", sets)
    ckpt = tmp_path / "a" / "checkpoints" / "step_2"
    assert checkpoints.read_state(ckpt)["in_flight"] == [{"step": 3, "version": 1, "epoch": 0}]
    resumed = run_loop(tmp_path / "b", sets, resume=ckpt)
    assert [m["step"] for m in resumed] == [3, 4]
    for got, want in zip(resumed, straight[2:]):
        same = {k for k in want if not k.startswith(NOISY)}
        assert {k: got[k] for k in same} == {k: want[k] for k in same}
