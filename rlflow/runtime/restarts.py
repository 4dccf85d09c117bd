"""The training attempts on Ray: start (or join) Ray, check the fit, start the pools, train; on a dead worker
stop the pools and resume from the last checkpoint, up to ``trainer.max_restarts`` times."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlflow.runtime import checkpoints, interrupts
from rlflow.runtime.console import RunConsole
from rlflow.runtime.run_dir import RunDir
from rlflow.runtime.run_facts import cluster_facts

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.runtime.step_loop import DataState

log = logging.getLogger("rlflow.runtime")


@dataclass
class RunResult:
    run_dir: Path
    last_step: int
    metrics: dict[str, Any]
    restarts: int


def import_torch() -> None:
    """The driver's step needs torch (its batches, verl's math): imported while the pools start, it
    stays out of the first step. (Loading the data needs none.)"""
    import torch  # noqa: F401


def train_on_ray(
    loaded,
    project,
    plan,
    rd: RunDir,
    data: DataState,
    ckpt: Path | None,
    resolved: str,
    sinks: list,
    console: RunConsole,
) -> RunResult:
    """Start (or join) Ray, then train attempt after attempt: a dead worker stops the pools, the fit is
    checked again, and the next attempt resumes from the last checkpoint, up to ``trainer.max_restarts``."""
    import ray

    from rlflow.runtime.cluster import start_ray
    from rlflow.runtime.fit import await_fit, cluster_nodes
    from rlflow.runtime.pools import demands, start_pools, stop_pools
    from rlflow.runtime.ray_executor import RayExecutor, WorkerDied
    from rlflow.runtime.step_loop import StepLoop, fresh_sampler

    spec = loaded.spec
    pipeline_dict = spec.model_dump(by_alias=True, mode="json")
    restarts = 0
    started = False
    try:
        with console.phase("start Ray") as phase, interrupts.restore_after_ray():
            started = start_ray(project, demands(plan, 0))
            nodes = cluster_nodes()
            phase.detail = cluster_facts(project, started, nodes)
        if project.ray.address:  # a joined cluster may span hosts; the embedded Ray is this machine
            from rlflow.runtime.node_paths import check_node_paths

            with console.phase("check nodes") as phase:
                phase.detail = check_node_paths(pipeline_dict, project.root, rd.path, tuple(project.plugins))
        gpus = sum(n.total.get("GPU", 0.0) for n in nodes)
        wanted, wait_s = demands(plan, gpus), project.ray.placement_timeout_s
        while True:
            # again before each restart: the worker that died may have taken its node, and its room, with it
            await_fit(wanted, wait_s, f"restart {restarts} of {spec.trainer.max_restarts}: " if restarts else "")
            console.on_phase = lambda label, start, end, attempt=restarts: rd.append_startup(label, start, end, attempt)
            pools = start_pools(
                plan,
                pipeline_dict,
                str(project.root),
                gpus,
                lambda p: main_config(pipeline_dict, p, project, rd.path),
                tuple(project.plugins),
                str(rd.path),
                console,
                meanwhile=import_torch,
                placement_timeout_s=wait_s,
            )
            rd.write_workers({name: pool.describe() for name, pool in pools.items()})
            executor = RayExecutor(pools, spec, rd.append_trace, str(rd.path), restarts, str(project.root))
            try:
                loop = StepLoop(spec, plan, executor, rd, data, resolved, sinks, console)
                first = loop.init(ckpt)
                console.start_training(loop.total, first)
                last = loop.train(first)
                return RunResult(rd.path, loop.total, last, restarts)
            except WorkerDied as exc:
                if restarts >= spec.trainer.max_restarts:
                    raise
                restarts += 1
                ckpt = checkpoints.latest(rd.checkpoints)
                log.warning(
                    "%s; restart %d of %d from %s", exc, restarts, spec.trainer.max_restarts, ckpt or "the start"
                )
                if ckpt is None:
                    data.sampler = fresh_sampler(spec, data)
                rd.truncate_metrics_after(int(checkpoints.read_state(ckpt)["global_step"]) if ckpt else -1)
            finally:
                executor.close()
                stop_pools(pools)
    finally:
        if started:
            ray.shutdown()


def main_config(pipeline_dict: dict, placement, project, run_dir: Path) -> dict[str, Any]:
    """What a remote backend is built from: JSON-able, so it can cross a process boundary. ``run_dir`` is
    absolute, since the backend may run in another working directory (the reference server runs in the root)."""
    return {
        "pipeline": pipeline_dict,
        "resource": placement.name,
        "backend_config": dict(placement.backend_config or {}),
        "project_root": str(project.root),
        "run_dir": str(Path(run_dir).absolute()),
    }
