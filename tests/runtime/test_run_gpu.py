"""``rlflow run`` on a CUDA GPU (opt-in: ``RLFLOW_TEST_GPU=1``): the local pool's actor and a remote backend's engine.

Real parts only: the CLI in a subprocess, Ray, torch on the GPU. Each run is two steps of the
shipped pipeline at small sizes; that the work ran on the GPU shows in the device-memory peak
that the update reports (0 on a CPU). The runs put the test plugins and the checkout in front
of PYTHONPATH, never in place of it: a GPU machine without network carries packages there
(checked on any machine).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from runtime_helpers import PLUGINS, REPO, python_path, read_jsonl, rlflow, small_sets

TWO_STEPS = ("trainer.total_steps=2", "trainer.test_freq=2", "trainer.save_freq=-1", "model.dtype=bfloat16")


def trained_on_the_gpu(run_dir) -> list[dict]:
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    for m in metrics[1:]:
        assert m["actor/perf/max_memory_allocated_gb"] > 0, "the update ran on the GPU"
        assert m["critic/score/mean"] == m["critic/score/mean"]  # a number, not NaN
    return metrics


def test_subprocesses_keep_the_packages_already_on_the_path(tmp_path, monkeypatch):
    """A machine that carries packages on PYTHONPATH (a GPU machine without network) keeps them in rlflow's runs."""
    carried = tmp_path / "carried"
    (carried / "carried_pkg").mkdir(parents=True)
    (carried / "carried_pkg" / "__init__.py").write_text("WHERE = 'carried'\n")
    monkeypatch.setenv("PYTHONPATH", str(carried))
    assert python_path().split(os.pathsep) == [str(PLUGINS), str(REPO), str(carried)]
    done = subprocess.run(
        [sys.executable, "-c", "import carried_pkg, rlflow; print(carried_pkg.WHERE)"],
        env={**os.environ, "PYTHONPATH": python_path()},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "carried", done.stderr


@pytest.mark.gpu
def test_the_actor_pool_trains_on_the_gpu(tmp_path):
    run_dir = tmp_path / "run"
    sets = small_sets(*TWO_STEPS, "resources.actor_pool.device=gpu")
    result = rlflow("run", "pipelines/bird_grpo.yaml", "--run-dir", str(run_dir), *sets)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = trained_on_the_gpu(run_dir)
    assert metrics[1]["perf/mfu/actor"] > 0


@pytest.mark.gpu
def test_a_remote_backend_trains_with_its_engine_on_the_gpu(tmp_path):
    run_dir = tmp_path / "run"
    sets = small_sets(*TWO_STEPS, "resources.arctic.config.device=cuda")
    result = rlflow("run", "pipelines/bird_grpo_remote.yaml", "--run-dir", str(run_dir), *sets)
    assert result.returncode == 0, result.stderr[-3000:]
    trained_on_the_gpu(run_dir)
