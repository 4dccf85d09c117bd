"""The remote seam's promise: the same pipeline on the reference remote backend and on a local pool gives equal metrics.

``pipelines/bird_grpo_remote.yaml`` is ``bird_grpo.yaml`` (``base:``) with the policy stages bound to the
remote backend, so the two shipped defaults run here as written, shrunk by ``--set`` to two small steps:
the real CLI, Ray, the out-of-process reference server and its forwarder. Both runs go at once (they are
separate processes with separate local Ray clusters, mostly waiting on start-up), each torch on one thread
so the arithmetic is the same bit for bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[3]
SMALL = [
    "trainer.total_steps=2",
    "trainer.train_batch_size=2",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=4",
    "algorithm.n=4",
    "data.max_response_length=16",
    "trainer.test_freq=-1",
    "trainer.save_freq=2",
    "trainer.val_before_train=false",
]
# wall-clock, memory and transport metrics differ by nature; everything else must match exactly
VOLATILE = (
    "timing_s/",
    "timing_per_token_ms/",
    "perf/time_per_step",
    "perf/throughput",
    "perf/mfu/",
    "actor/perf/",
    "forwarder/",
    "rollout/gen_seconds",
    "sync/seconds",
)


def _start(pipeline: str, run_dir: Path, *extra: str) -> subprocess.Popen:
    sets = [arg for s in (*SMALL, *extra) for arg in ("--set", s)]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    return subprocess.Popen(
        [sys.executable, "-m", "rlflow.cli.main", "run", pipeline, *sets, "--run-dir", str(run_dir)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _metrics(run: subprocess.Popen, run_dir: Path) -> list[dict]:
    try:
        output, _ = run.communicate(timeout=600)
    finally:
        run.kill()
    assert run.returncode == 0, output
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _stable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(VOLATILE)}


def test_remote_and_local_runs_give_equal_metrics(tmp_path):
    remote_run = _start("pipelines/bird_grpo_remote.yaml", tmp_path / "remote", "resources.arctic.config.num_threads=1")
    local_run = _start(
        "pipelines/bird_grpo.yaml",
        tmp_path / "local",
        "resources.actor_pool.device=cpu",
        "resources.actor_pool.cpus_per_worker=1",
    )
    remote, local = _metrics(remote_run, tmp_path / "remote"), _metrics(local_run, tmp_path / "local")
    assert [m["step"] for m in remote] == [m["step"] for m in local] == [1, 2]
    assert any(m["actor/pg_loss"] != 0 for m in local), "the policy gradient must take part"
    for on_remote, on_local in zip(remote, local):
        assert _stable(on_remote) == _stable(on_local)
    assert remote[-1]["forwarder/bytes_sent"] > remote[0]["forwarder/bytes_sent"] > 0
    assert remote[-1]["sync/bytes"] == 0.0
    assert (tmp_path / "remote" / "checkpoints" / "step_2").is_dir()
