"""``run_pipeline``: everything ``rlflow run`` does, from a loaded pipeline to a finished run.

Order: lock the run directory (one run per directory, see ``run_lock``), compile the plan,
load the data on the driver, start (or join) Ray, check that the
cluster can hold every pool (fail within seconds, shortfall named), start the pools, train.
Whatever happens (an error, a dead worker, Ctrl-C) the pools are stopped and remote backends
destroyed; the last complete checkpoint stays usable. With ``trainer.max_restarts > 0`` a
dead worker makes the run stop the pools, start them again and resume from the last
checkpoint, truncating metrics past it so no step is lost or repeated.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlflow.errors import ResumeError
from rlflow.runtime import checkpoints, interrupts
from rlflow.runtime.run_dir import RESOLVED, WORKERS, RunDir, latest_run, new_run_id
from rlflow.runtime.run_lock import RunLock, claim_run_dir

log = logging.getLogger("rlflow.runtime")


@dataclass
class RunResult:
    run_dir: Path
    last_step: int
    metrics: dict[str, Any]
    restarts: int


def prepare_run_dir(loaded, project, run_dir: str | None, resume: str | None) -> tuple[RunDir, Path | None, RunLock]:
    """Pick and lock the run directory and, when resuming, the checkpoint to start from. The lock comes
    before any file is read or written; on a refusal it is released and what it created removed."""
    runs_dir = project.resolve(project.runs_dir)
    name = loaded.spec.name
    if resume is None:
        path = Path(run_dir) if run_dir else runs_dir / name / new_run_id()
        lock = claim_run_dir(path)
        if (path / "metrics.jsonl").exists():
            lock.release()
            raise ResumeError(
                f"run directory {path} already holds a run; use --resume {path} to continue it, or another --run-dir"
            )
        return RunDir(path), None, lock
    target = latest_run(runs_dir, name) if resume == "latest" else Path(resume)
    if target is None or not target.is_dir():
        raise ResumeError(
            f"nothing to resume: no run {'of ' + name + ' under ' + str(runs_dir) if resume == 'latest' else 'at ' + resume}"
        )
    lock = claim_run_dir(target)
    try:
        rd = RunDir(target)
        swept = checkpoints.sweep_partial(rd.checkpoints)
        if swept:
            log.warning("ignored half-written checkpoints %s (a run died while writing them)", ", ".join(swept))
        ckpt = checkpoints.latest(rd.checkpoints)
        if ckpt is None:
            raise ResumeError(
                f"{target} has no complete checkpoint to resume from (set trainer.save_freq to write them)"
            )
    except BaseException:
        lock.release()
        raise
    return rd, ckpt, lock


def run_pipeline(
    loaded, project, *, run_dir: str | None = None, resume: str | None = None, force: bool = False
) -> RunResult:
    """Run under the run directory's lock; a run that fails before writing a step leaves no directory behind."""
    rd, ckpt, lock = prepare_run_dir(loaded, project, run_dir, resume)
    try:
        return _run_locked(loaded, project, rd, ckpt, force)
    except BaseException:
        lock.discard((RESOLVED, WORKERS))
        raise
    finally:
        lock.release()


def _run_locked(loaded, project, rd: RunDir, ckpt: Path | None, force: bool) -> RunResult:
    from rlflow.plan.compile import compile_plan
    from rlflow.runtime.trainer import load_data, total_steps

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    spec = loaded.spec
    resolved = loaded.resolved_yaml()
    if ckpt is not None:
        checkpoints.check_resumable((ckpt / "pipeline.resolved.yaml").read_text(), resolved, force)
    plan = compile_plan(spec)
    done = int(checkpoints.read_state(ckpt)["global_step"]) if ckpt is not None else 0
    if spec.trainer.total_steps is not None:  # known before loading any data: refuse an empty resume at once
        _check_work_left(done, spec.trainer.total_steps)
    data = load_data(spec, project.root)
    if ckpt is not None:
        _check_work_left(done, total_steps(spec, data))
        rd.truncate_metrics_after(done)
    rd.write_resolved(resolved)
    _log_data_stats(data)
    with interrupts.guard():
        return _train_with_restarts(loaded, project, plan, rd, data, ckpt, resolved)


def _check_work_left(done: int, total: int) -> None:
    if done >= total:
        raise ResumeError(
            f"nothing to train: the checkpoint is at step {done} and the pipeline stops at step {total} "
            "(raise trainer.total_steps with --set trainer.total_steps=N)"
        )


def _train_with_restarts(loaded, project, plan, rd: RunDir, data, ckpt: Path | None, resolved: str) -> RunResult:
    import ray

    from rlflow.runtime.cluster import check_fit, cluster_nodes, start_ray
    from rlflow.runtime.pools import demands, start_pools, stop_pools
    from rlflow.runtime.ray_executor import RayExecutor, WorkerDied
    from rlflow.runtime.sinks import build_sinks
    from rlflow.runtime.trainer import StepLoop, fresh_sampler, total_steps

    spec = loaded.spec
    pipeline_dict = spec.model_dump(by_alias=True, mode="json")
    cpu_demand = sum(d.workers * d.cpus for d in demands(plan, 0))
    started = start_ray(project, cpu_demand)
    restarts = 0
    sinks: list = []
    try:
        nodes = cluster_nodes()
        gpus = sum(n["GPU"] for n in nodes)
        check_fit(demands(plan, gpus), nodes)
        start = (int(checkpoints.read_state(ckpt)["global_step"]) + 1) if ckpt else 1
        sinks = build_sinks(project.logging, rd.path, spec.name, pipeline_dict, total_steps(spec, data), start)
        while True:
            pools = start_pools(
                plan,
                pipeline_dict,
                str(project.root),
                gpus,
                lambda p: main_config(pipeline_dict, p, project),
                tuple(project.plugins),
                str(rd.path),
            )
            rd.write_workers({name: pool.describe() for name, pool in pools.items()})
            try:
                executor = RayExecutor(pools, spec, rd.append_trace, str(rd.path), restarts, str(project.root))
                loop = StepLoop(spec, plan, executor, rd, data, resolved, sinks)
                first = loop.init(ckpt)
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
                stop_pools(pools)
    finally:
        for sink in sinks:
            sink.close()
        if started:
            ray.shutdown()


def main_config(pipeline_dict: dict, placement, project) -> dict[str, Any]:
    """What a remote backend is built from: JSON-able, so it can cross a process boundary."""
    return {
        "pipeline": pipeline_dict,
        "resource": placement.name,
        "backend_config": dict(placement.backend_config or {}),
        "project_root": str(project.root),
    }


def _log_data_stats(data) -> None:
    for split, ds in (("train", data.train), ("val", data.val)):
        if ds is not None:
            log.info("%s data: %s", split, ", ".join(f"{k}={v}" for k, v in ds.stats.items()))
