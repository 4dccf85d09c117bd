"""The critic under DeepSpeed (``update_actor.with.engine: deepspeed``): the same updates as the torch critic, and
an exact replay from its checkpoint.

Run in a child process, as the DeepSpeed engine tests are: DeepSpeed's process group outlives the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("deepspeed")

SCRIPT = r"""
import json, sys, tempfile
import torch
from rlflow.backends.local.factory import create_local_engine
from rlflow.check.engines import engine_choice
from rlflow.schemas.pipeline import Pipeline
from rlflow.batch import Batch
from rlflow.backends.local.models import build_prompt_batch

def pipeline(engine, zero_stage):
    update = {"engine": engine, "zero_stage": zero_stage} if engine == "deepspeed" else {}
    return Pipeline.model_validate({
        "name": "ds-critic", "data": {"train": "train.json", "max_prompt_length": 32, "max_response_length": 8},
        "algorithm": {"n": 2, "adv_estimator": "gae"},
        "trainer": {"train_batch_size": 4, "ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 1, "seed": 5},
        "critic": {"optim": {"lr": 1e-3}},
        "resources": {"pool": {"type": "local", "device": "cpu"}},
        "stages": [
            {"name": "generate", "uses": "generate", "on": "pool"},
            {"name": "old_log_prob", "uses": "old_log_prob", "on": "pool"},
            {"name": "values", "uses": "compute_values", "on": "pool"},
            {"name": "advantage", "uses": "grpo_advantage", "on": "driver"},
            {"name": "update_critic", "uses": "update_critic", "on": "pool"},
            {"name": "update_actor", "uses": "update_actor", "on": "pool", "with": update},
            {"name": "sync_weights", "uses": "sync_weights", "on": "pool"},
        ],
    })

def engine(spec):
    return create_local_engine(spec, engine_choice(spec), roles=frozenset({"critic"}))

def batch(tokenizer):
    out = build_prompt_batch(tokenizer, ["How many?", "List the shops.", "SELECT", "Count."], 32).repeat_interleave(2)
    gen = torch.Generator().manual_seed(11)
    out["responses"] = torch.randint(5, 200, (8, 8), generator=gen)
    out["response_mask"] = (torch.arange(8)[None, :] < torch.randint(2, 9, (8, 1), generator=gen)).long()
    out["returns"] = torch.randn(8, 8, generator=gen) * out["response_mask"]
    return out

def updates(critic_engine, rows, count):
    out = []
    for step in range(1, count + 1):
        values = critic_engine.compute_values(rows.select(["prompts", "prompt_mask", "responses", "response_mask"]),
                                              {"micro_batch_size": 2})["values"]
        rows["values"] = values
        metrics = critic_engine.update_critic(rows, {"global_steps": step})
        out.append({"values": values.sum().item(), **metrics})
    return out

zero = int(sys.argv[1])
torch_engine = engine(pipeline("torch", 0))
rows = batch(torch_engine.tokenizer)
reference = updates(torch_engine, Batch(dict(rows.tensors)), 3)
ds = engine(pipeline("deepspeed", zero))
kind = type(ds.critic).__name__
trained = updates(ds, Batch(dict(rows.tensors)), 2)
with tempfile.TemporaryDirectory() as ckpt:
    ds.save_checkpoint(ckpt, 2)
    last = updates(ds, Batch(dict(rows.tensors)), 1)
    again = engine(pipeline("deepspeed", zero))
    again.load_checkpoint(ckpt)
    replay = updates(again, Batch(dict(rows.tensors)), 1)
print(json.dumps({"kind": kind, "reference": reference, "trained": trained + last, "replay": replay}))
"""


@pytest.mark.timeout(600)
@pytest.mark.parametrize("zero_stage", [0, 2])
def test_the_deepspeed_critic_updates_as_the_torch_critic_and_replays_from_its_checkpoint(zero_stage):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(zero_stage)],
        capture_output=True,
        text=True,
        timeout=560,
        env={**os.environ, "DS_ACCELERATOR": "cpu"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["kind"] == "DeepSpeedCritic"
    for ours, theirs in zip(out["trained"], out["reference"], strict=True):
        for key in ("values", "critic/vf_loss", "critic/vf_clipfrac", "critic/grad_norm"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
    (replay,) = out["replay"]
    assert replay == pytest.approx(out["trained"][-1], rel=1e-6, abs=1e-7)  # the checkpoint holds module and Adam
