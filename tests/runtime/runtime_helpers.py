"""Helpers for end-to-end runtime tests: the real CLI in a subprocess, on the shipped sample."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLUGINS = Path(__file__).resolve().parent / "plugins"
# Small enough for a 2-core machine: 4 prompts x 4 samples, short responses, 8 validation prompts.
SMALL = [
    "trainer.train_batch_size=4",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=4",
    "algorithm.n=4",
    "data.max_response_length=24",
    "data.max_val_samples=8",
    "model_path=builtin:tiny-qwen2",
]


def small_sets(*extra: str) -> list[str]:
    """``--set`` arguments for the small sizes plus ``extra`` overrides (later ones win)."""
    return as_args([*SMALL, *extra])


def as_args(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def python_path() -> str:
    """The test plugins and the checkout first, then whatever PYTHONPATH already holds (packages carried along)."""
    return os.pathsep.join(filter(None, [str(PLUGINS), str(REPO), os.environ.get("PYTHONPATH")]))


def rlflow(*args: str, cwd: Path = REPO, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": python_path(), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "rlflow.cli.main", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start_rlflow(*args: str, cwd: Path = REPO) -> subprocess.Popen:
    """``rlflow`` in the background, in its own session (so a test can signal or kill it)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": python_path()}
    return subprocess.Popen(
        [sys.executable, "-m", "rlflow.cli.main", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a process and everything it started (Ray's raylet, GCS and workers)."""
    import psutil

    try:
        parent = psutil.Process(proc.pid)
        family = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(family, timeout=30)


# wall-clock and memory readings: left out when two runs' metrics are compared
NOISY = ("timing_s/", "timing_per_token_ms/", "perf/", "actor/perf/", "rollout/gen_seconds", "sync/seconds")


def train_in_process(pipeline: Path, sets: list[str], run_dir: Path, resume: Path | None = None, sinks=None) -> list:
    """Train ``pipeline`` with ``sets`` over the in-process executor (no Ray); the records of metrics.jsonl.
    ``sinks`` is handed to the loop as it is (the loop drops a sink that fails)."""
    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan
    from rlflow.runtime.inprocess import InProcessExecutor
    from rlflow.runtime.run_dir import RunDir
    from rlflow.runtime.step_loop import StepLoop, load_data

    loaded = load_pipeline(pipeline, sets)
    spec, plan = loaded.spec, compile_plan(loaded.spec)
    rd = RunDir(run_dir)
    executor = InProcessExecutor(plan, spec, str(REPO), rd.append_trace, str(rd.path))
    try:
        loop = StepLoop(
            spec, plan, executor, rd, load_data(spec, REPO), loaded.resolved_yaml(), [] if sinks is None else sinks
        )
        loop.train(loop.init(resume))
    finally:
        executor.close()
    return read_jsonl(run_dir / "metrics.jsonl")


def pipeline_with_death(project_dir: Path, at_step: int) -> Path:
    """``crash.yaml`` in ``project_dir``: the shipped BIRD pipeline plus a stage that kills its worker once at
    ``at_step`` (the ``rlflow_test_faults`` plugin); returns the marker file the death leaves."""
    marker = project_dir / "died.marker"
    text = (REPO / "pipelines" / "bird_grpo.yaml").read_text()
    text += (
        f"  - {{name: crash, uses: test_die_once, on: reward_pool, with: {{marker: '{marker}', at_step: {at_step}}}}}\n"
    )
    (project_dir / "crash.yaml").write_text(text)
    return marker


def cluster_project(project_dir: Path, address: str, stage: str) -> str:
    """A project in ``project_dir`` joining the cluster at ``address``: the shipped BIRD pipeline plus ``stage`` (a
    flow-style stage of the ``rlflow_test_faults`` plugin) as ``crash.yaml``. The plugin is copied into the project,
    whose folder the nodes import plugins from (they were started without the test plugins on their path)."""
    import shutil

    from rlflow.assets import BIRD_SAMPLE

    (project_dir / "rlflow.yaml").write_text(
        f"vars: {{model_path: 'builtin:tiny-qwen2', bird_root: '{BIRD_SAMPLE}'}}\n"
        f"ray: {{address: '{address}'}}\nplugins: [rlflow_test_faults]\n"
    )
    shutil.copy(PLUGINS / "rlflow_test_faults.py", project_dir)
    (project_dir / "crash.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text() + f"  - {stage}\n")
    return "crash.yaml"
