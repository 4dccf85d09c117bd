"""``rlflow run`` on a CUDA GPU (opt-in: ``RLFLOW_TEST_GPU=1``): the local pool's actor and a remote backend's engine.

Real parts only: the CLI in a subprocess, Ray, torch on the GPU. Each run is two steps of the
shipped pipeline at small sizes; that the work ran on the GPU shows in the device-memory peak
that the update reports (0 on a CPU).
"""

from __future__ import annotations

import pytest
from runtime_helpers import read_jsonl, rlflow, small_sets

pytestmark = pytest.mark.gpu
TWO_STEPS = ("trainer.total_steps=2", "trainer.test_freq=2", "trainer.save_freq=-1", "model.dtype=bfloat16")


def trained_on_the_gpu(run_dir) -> list[dict]:
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    for m in metrics[1:]:
        assert m["actor/perf/max_memory_allocated_gb"] > 0, "the update ran on the GPU"
        assert m["critic/score/mean"] == m["critic/score/mean"]  # a number, not NaN
    return metrics


def test_the_actor_pool_trains_on_the_gpu(tmp_path):
    run_dir = tmp_path / "run"
    sets = small_sets(*TWO_STEPS, "resources.actor_pool.device=gpu")
    result = rlflow("run", "pipelines/bird_grpo.yaml", "--run-dir", str(run_dir), *sets)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = trained_on_the_gpu(run_dir)
    assert metrics[1]["perf/mfu/actor"] > 0


def test_a_remote_backend_trains_with_its_engine_on_the_gpu(tmp_path):
    run_dir = tmp_path / "run"
    sets = small_sets(*TWO_STEPS, "resources.arctic.config.device=cuda")
    result = rlflow("run", "pipelines/bird_grpo_remote.yaml", "--run-dir", str(run_dir), *sets)
    assert result.returncode == 0, result.stderr[-3000:]
    trained_on_the_gpu(run_dir)
