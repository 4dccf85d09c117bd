"""separate_async with verl's rollout correction: the stale batch's gap to the actor is what it corrects.

A batch sampled one version behind the actor that trains on it differs from the actor's
``old_log_prob`` by a real policy gap (in ``sync`` only by decoding arithmetic), so the importance
weights move off 1; in bypass mode the configured loss takes the stale rollout's log-probs as the old policy.
"""

from __future__ import annotations

import json

import pytest
import torch
from runtime_helpers import REPO, SMALL

from rlflow.check import load_pipeline
from rlflow.plan.compile import compile_plan
from rlflow.runtime.inprocess import InProcessExecutor
from rlflow.runtime.run_dir import RunDir
from rlflow.runtime.step_loop import StepLoop, load_data

RC = "algorithm.rollout_correction"
ASYNC = [
    *SMALL,
    "data.max_val_samples=4",
    "trainer.total_steps=3",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
    "trainer.optim.lr=1e-3",  # a step moves the policy measurably
    "resources.rollout_pool={type: local, device: cpu, cpus_per_worker: 1}",
    "stages.generate.on=rollout_pool",
    "trainer.max_off_policy_threshold=2",
]


def run(tmp_path, *sets: str) -> list[dict]:
    loaded = load_pipeline(REPO / "pipelines" / "bird_grpo.yaml", [*ASYNC, *sets])
    spec, plan = loaded.spec, compile_plan(loaded.spec)
    rd = RunDir(tmp_path / "run")
    executor = InProcessExecutor(plan, spec, str(REPO), rd.append_trace, str(rd.path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loop = StepLoop(spec, plan, executor, rd, load_data(spec, REPO), loaded.resolved_yaml(), [])
        loop.train(loop.init(None))
    finally:
        executor.close()
        torch.set_num_threads(threads)
    return [json.loads(line) for line in (rd.path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("mode", ["sync", "separate_async"])
def test_decoupled_weights_see_the_staleness(tmp_path, mode):
    steps = run(tmp_path, f"trainer.trainer_mode={mode}", f"{RC}.rollout_is=token", f"{RC}.rollout_is_threshold=5.0")
    last = steps[-1]
    stale = last["training/off_policy/trajectory_staleness/max"]
    assert stale == (1 if mode == "separate_async" else 0)
    gap = abs(last["rollout_corr/k3_kl"])
    if stale:
        assert gap > 1e-6 and last["rollout_corr/rollout_is_std"] > 1e-4, "a version behind: a real gap to weigh"
    else:
        assert gap < 1e-6, "the same weights: only arithmetic differs"


def test_bypass_mode_trains_on_the_stale_rollouts_log_probs(tmp_path):
    steps = run(tmp_path, "trainer.trainer_mode=separate_async", f"{RC}.bypass_mode=true")
    last = steps[-1]
    assert last["training/off_policy/trajectory_staleness/max"] == 1
    assert "timing_s/old_log_prob" not in last and "actor/entropy" not in last
    assert abs(last["actor/ppo_kl"]) > 1e-6  # the vanilla ratio is against the stale behaviour policy
    assert not any(k.startswith("rollout_corr/") for k in last), "verl's V1 trainer corrects nothing in bypass mode"
