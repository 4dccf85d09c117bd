"""A remote backend's outputs are checked at the stage boundary: a broken engine fails the run by name.

The real reference backend (an out-of-process server) serves a fake engine whose responses are
one column short of ``data.max_response_length``; the step loop runs over the in-process
executor, as ``rlflow run`` does over Ray, and must stop at the rollout with a StageError that
names the backend, the stage, the field and both shapes, before anything trains on the batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlflow.check import load_pipeline
from rlflow.errors import StageError
from rlflow.plan.compile import compile_plan
from rlflow.runtime.inprocess import InProcessExecutor
from rlflow.runtime.restarts import main_config
from rlflow.runtime.run_dir import RunDir
from rlflow.runtime.step_loop import StepLoop, load_data
from rlflow.schemas.project import load_project_config

REPO = Path(__file__).resolve().parents[3]
SETS = [
    "model_path=builtin:tiny-qwen2",
    "trainer.train_batch_size=2",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=4",
    "algorithm.n=2",
    "data.max_response_length=8",
    "trainer.total_steps=1",
    "trainer.val_before_train=false",
    'resources.arctic.config={engine: "remote_fake_engine:short", num_threads: 1, retries: 0}',
]


def test_responses_one_column_short_fail_the_run_at_the_rollout(tmp_path, fake_importable):
    project = load_project_config(REPO)
    loaded = load_pipeline(REPO / "pipelines" / "bird_grpo_remote.yaml", SETS, project)
    spec, plan = loaded.spec, compile_plan(loaded.spec)
    rd = RunDir(tmp_path / "run")
    pipeline_dict = spec.model_dump(by_alias=True, mode="json")
    executor = InProcessExecutor(
        plan,
        spec,
        str(REPO),
        rd.append_trace,
        str(rd.path),
        main_config_for=lambda placement: main_config(pipeline_dict, placement, project, rd.path),
    )
    try:
        loop = StepLoop(spec, plan, executor, rd, load_data(spec, REPO), loaded.resolved_yaml(), [])
        with pytest.raises(StageError) as info:
            loop.train(loop.init(None))
    finally:
        executor.close()
    assert str(info.value) == (
        "step 1, stage 'generate' on remote backend 'reference' (resource 'arctic') returned a batch that breaks "
        "the stage's outputs: field 'responses': expected [rows, 8] integer, got [4, 7] int64; "
        "field 'response_mask': expected [rows, 8] integer, got [4, 7] int64 (the engine or backend behind it "
        "must return every field the stage writes, in that shape and dtype)"
    )
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing trained, nothing logged
