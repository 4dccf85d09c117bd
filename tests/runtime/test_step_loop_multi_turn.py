"""Two training steps with multi_turn enabled, on the in-process executor (no Ray).

The shipped BIRD pipeline, validated at step 2, with the generate stage's verl ``multi_turn`` block pointing at the
verl tools of tests/tools/assets: the tool process starts, the rollout runs the agent loop, the
step logs verl's ``num_turns/*`` and trains on the transcripts.
"""

from __future__ import annotations

import json

import torch
from runtime_helpers import REPO, SMALL

from rlflow.check import load_pipeline
from rlflow.plan.compile import compile_plan
from rlflow.runtime.inprocess import InProcessExecutor
from rlflow.runtime.run_dir import RunDir
from rlflow.runtime.step_loop import StepLoop, load_data

SETS = [
    *SMALL,
    "trainer.total_steps=2",
    "trainer.test_freq=2",
    "data.max_val_samples=4",
    "trainer.val_before_train=false",
    "stages.generate.with.multi_turn.enable=true",
    "stages.generate.with.multi_turn.max_assistant_turns=3",
    "stages.generate.with.multi_turn.tool_config_path=tests/tools/assets/tools.yaml",
    "stages.generate.with.multi_turn.function_tool_path=tests/tools/assets/function_tools.py",
]


def test_two_steps_with_multi_turn(tmp_path):
    torch.set_num_threads(1)
    loaded = load_pipeline(REPO / "pipelines" / "bird_grpo.yaml", SETS)
    spec, plan = loaded.spec, compile_plan(loaded.spec)
    rd = RunDir(tmp_path / "run")
    executor = InProcessExecutor(plan, spec, str(REPO), rd.append_trace, str(rd.path))
    try:
        loop = StepLoop(spec, plan, executor, rd, load_data(spec, REPO), loaded.resolved_yaml(), [])
        loop.train(loop.init(None))
    finally:
        executor.close()
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert 2 <= metrics[1]["val-aux/num_turns/min"] <= metrics[1]["val-aux/num_turns/mean"] <= 6  # validated at 2
    for step in metrics:
        assert 2 <= step["num_turns/min"] <= step["num_turns/mean"] <= step["num_turns/max"] <= 6
        assert step["actor/pg_loss"] == step["actor/pg_loss"]  # finite: the update ran on the transcripts
    dumped = [json.loads(line) for line in (tmp_path / "run" / "transcripts.jsonl").read_text().splitlines()]
    assert [d["step"] for d in dumped] == [1] * 4 + [2] * 4  # a few whole rollouts per step, verl's dump keys
    assert all(d["input"] and isinstance(d["output"], str) and 2 <= d["num_turns"] <= 6 for d in dumped)
    assert all(isinstance(d["score"], float) for d in dumped)
