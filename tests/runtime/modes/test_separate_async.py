"""The separate_async trainer mode over the in-process executor (one thread per resource, no Ray).

The shipped BIRD pipeline at small sizes with its rollout moved to a pool of its own: the
next step's batch is sampled while a step trains, every batch's staleness stays within the
bound under both strategies, and a run resumed from a checkpoint (which saves the batch in
flight) logs the same steps as a straight run. ``drop``'s eviction is checked against verl's own
replay buffer on the same batches (``verl_replay_buffer``).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from runtime_helpers import NOISY, REPO, SMALL, train_in_process
from verl_replay_buffer import Rollout, load_replay_buffer, sampled_prompts

from rlflow.batch import Batch
from rlflow.data.sampler import StepSampler
from rlflow.metrics import off_policy_metrics
from rlflow.runtime import checkpoints
from rlflow.runtime.modes.separate_async import SeparateAsyncMode

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


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the runs here are bit-compared


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
    assert [m["training/off_policy/evicted_samples"] for m in metrics] == [0, 0, 0], "logged when nothing is dropped"
    records = trace(tmp_path / "a")
    gen2 = next(r for r in records if r["stage"] == "generate" and r["step"] == 2)
    update1 = next(r for r in records if r["stage"] == "update_actor" and r["step"] == 1)
    trains1 = min(r["start"] for r in records if r["step"] == 1 and r["resource"] == "actor_pool")
    # step 2's rollout runs while step 1 trains (its log-prob passes and update), however short either is
    assert gen2["start"] < update1["end"] and gen2["end"] > trains1, "step 2's rollout overlaps step 1's training"
    assert {r["resource"] for r in records if r["stage"] == "generate"} == {"rollout_pool"}


def test_a_stage_timer_counts_the_stage_not_its_wait_behind_others(tmp_path):
    """Stages submitted side by side queue on their resources (ref_log_prob behind old_log_prob on the
    actor's); each timer is its stage's own run, as the trace records it."""
    metrics = run_loop(tmp_path / "a", ["trainer.total_steps=2", "trainer.val_before_train=false"])
    timers = {"reward": "reward", "old_log_prob": "old_log_prob", "ref_log_prob": "ref", "advantage": "adv"}
    records = trace(tmp_path / "a")
    for m in metrics:
        for stage, timer in timers.items():
            ran = max(r["end"] - r["start"] for r in records if r["stage"] == stage and r["step"] == m["step"])
            assert m[f"timing_s/{timer}"] == pytest.approx(ran, abs=5e-3), (m["step"], stage)
        old = next(r for r in records if r["stage"] == "old_log_prob" and r["step"] == m["step"])
        ref = next(r for r in records if r["stage"] == "ref_log_prob" and r["step"] == m["step"])
        assert ref["start"] >= old["end"] and m["timing_s/ref"] < ref["end"] - old["start"], "not its queueing"


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


def test_drop_evicts_a_stale_batch_and_samples_fresh_prompts_as_verls_replay_buffer(monkeypatch):
    """Step 3, threshold 2: batch A (sampled by version 0, verl's tag 1) spans 3 versions, batch B
    (version 1, tag 2) spans 2. verl evicts A, refills as many fresh prompts and samples B; so does rlflow."""
    size, n = 4, 2
    sampler = StepSampler(200, size, seed=0, shuffle=False)

    def draw(step: int) -> Batch:
        indices = sampler.next_indices()
        return Batch({}, {"uid": [f"{step}-{i}" for i in indices], "index": indices})

    rollout = SimpleNamespace(name="generate", role="rollout", verl_timer="gen")
    loop = SimpleNamespace(  # the StepLoop methods a mode calls, over a sampler
        plan=SimpleNamespace(
            pipeline_name="fake",
            first_with_role=lambda role: rollout if role == "rollout" else None,
            step=(rollout,),
            refill=(),
            overlap=(("generate", ("update_actor",)),),
            staleness=SimpleNamespace(num_warmup_batches=2, max_off_policy_threshold=2, max_off_policy_strategy="drop"),
        ),
        epoch=0,
        draw=draw,
        submit=lambda stage, batch, step: batch,
        wait=lambda sent: sent.repeat_interleave(n),
        total=10,
    )
    mode = SeparateAsyncMode(loop)
    for version, step in ((0, 3), (1, 4)):  # A, then B, sampled ahead
        mode.version = version
        mode.queue.append(mode._sample(step))
    mode.version, mode.next_step = 2, 5
    taken, evicted = mode._take(3)

    replay_buffer, store = load_replay_buffer(monkeypatch)
    verl_rollout = Rollout(store, n, lambda i, sample: 0.0, range(200))
    for tag in (1, 2):  # verl tags a prompt with the step it was sent in: version + 1
        verl_rollout.global_steps = tag
        verl_rollout.submit(size)
    verl_rollout.global_steps = 3
    buffer = replay_buffer.ReplayBufferAsync("separate_async", {}, 2, "drop", {}, poll_interval=0.0,
                                             refill_fn=verl_rollout.submit)  # fmt: skip
    batch, metrics = buffer.sample(3, "train", size)

    assert sorted(set(taken.batch["index"])) == sampled_prompts(batch) == [4, 5, 6, 7]  # B
    assert verl_rollout.sent[2:] == [size], "verl refills as many prompts as it evicted"
    [refill] = mode.queue
    assert (refill.step, refill.version) == (4, 2) and sorted(refill.handle["index"]) == [8, 9, 10, 11]  # fresh prompts
    assert taken.step == 3 and taken.version == 1
    ours = off_policy_metrics(3, [taken.version] * len(taken.batch), evicted)
    assert {k: v for k, v in ours.items() if "evicted" in k} == {k: v for k, v in metrics.items() if "evicted" in k}
    assert metrics["training/off_policy/evicted_samples"] == size


def test_a_drop_run_resumes_exactly_across_an_eviction(tmp_path):
    sets = [
        "trainer.total_steps=4",
        "trainer.save_freq=2",
        "trainer.val_before_train=false",
        "trainer.max_off_policy_strategy=drop",
        "trainer.num_warmup_batches=2",
    ]
    straight = run_loop(tmp_path / "a", sets)
    assert [m["training/off_policy/evicted_samples"] for m in straight] == [0, 0, 4, 0]  # step 3's batch spans 3
    resumed = run_loop(tmp_path / "b", sets, resume=tmp_path / "a" / "checkpoints" / "step_2")
    assert [m["step"] for m in resumed] == [3, 4]
    for got, want in zip(resumed, straight[2:]):
        same = {k for k in want if not k.startswith(NOISY)}
        assert {k: got[k] for k in same} == {k: want[k] for k in same}
