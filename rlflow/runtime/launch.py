"""``run_pipeline``: everything ``rlflow run`` does, from a loaded pipeline to a finished run.

Order: lock the run directory (one run per directory, see ``run_lock``), compile the plan,
compare it with the installed verl's step (each difference a warning, see
``rlflow.check.verl_order``), load the data on the driver (tokenized prompts, no torch: a
fraction of a second, and a bad file fails before anything starts), start (or join) Ray, on a
joined cluster check that every node sees the run's files (``node_paths``), check
that the cluster's nodes have room for every pool (refused within seconds, the shortfall named, or
after a bounded wait for room another job holds), start the pools (the driver imports torch while
their workers start), then train.
Whatever happens (an error, a dead worker, Ctrl-C) the pools are stopped and remote backends
destroyed; the last complete checkpoint stays usable. A run that fails before its first checkpoint
leaves no run directory; one that fails later leaves it resumable; one stopped on purpose (Ctrl-C,
SIGTERM) keeps what it logged; the lock is released in every case. ``rlflow run`` supervises the driver (``supervise``), so a driver that dies natively is
cleaned up after too; a directory left by a run nobody supervised is swept by the next run. With ``trainer.max_restarts > 0`` a
dead worker makes the run stop the pools, check the fit again (a lost node may leave too little
room: refused naming the pool), start them again and resume from the last checkpoint, truncating
metrics past it so no step is lost or repeated.

The console (``RunConsole``) narrates it: a header with the run directory and the pipeline's
key facts, then each start-up phase with its duration (loading data, starting Ray, starting
each pool and loading its model; the pools start side by side); those phases, each with its own start
and end, also go to the run directory's ``startup.jsonl``, for the timeline.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlflow.errors import CannotWrite, ResumeError, RunDirInUse
from rlflow.runtime import checkpoints, interrupts
from rlflow.runtime.console import RunConsole
from rlflow.runtime.run_dir import CHECKPOINTS, RunDir, latest_run, new_run_id
from rlflow.runtime.run_facts import cluster_facts, data_facts, run_facts
from rlflow.runtime.run_lock import RunLock, claim_run_dir, holders, sweep_abandoned

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.runtime.step_loop import DataState

log = logging.getLogger("rlflow.runtime")


@dataclass
class RunResult:
    run_dir: Path
    last_step: int
    metrics: dict[str, Any]
    restarts: int


def prepare_run_dir(loaded, project, run_dir: str | None, resume: str | None) -> tuple[RunDir, Path | None, RunLock]:
    """Pick and lock the run directory and, when resuming, the checkpoint to start from. The lock comes
    before any file is read or written; on a refusal it is released and what it created removed. A path the
    system refuses (a file there, a device, a name too long) is one line naming it."""
    try:
        return _prepare_run_dir(loaded, project, run_dir, resume)
    except OSError as exc:
        where = exc.filename or run_dir or project.resolve(project.runs_dir)
        reason = exc.strerror or str(exc)
        if isinstance(exc, FileExistsError):
            reason = "it exists and is not a folder"
        elif isinstance(exc, NotADirectoryError):
            reason = "a part of the path is a file, not a folder"
        fix = "a shorter --run-dir or pipeline name" if exc.errno == errno.ENAMETOOLONG else "another --run-dir"
        raise CannotWrite(f"cannot use {str(where)[:200]!s} as the run directory: {reason}; choose {fix}") from None


def _prepare_run_dir(loaded, project, run_dir: str | None, resume: str | None) -> tuple[RunDir, Path | None, RunLock]:
    runs_dir = project.resolve(project.runs_dir)
    name = loaded.spec.name
    sweep_abandoned(runs_dir / name, _resumable)
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
    if target is None and resume == "latest":
        for path, holder in holders(runs_dir / name):
            raise RunDirInUse(
                f"nothing to resume yet: the run of {name} in {path} is live ({holder}) and has not started "
                "training; wait for it to end or stop it"
            )
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
    loaded,
    project,
    *,
    run_dir: str | None = None,
    resume: str | None = None,
    force: bool = False,
    console: RunConsole | None = None,
    supervise: bool = False,
) -> RunResult:
    """Run under the run directory's lock; a run that fails before its first checkpoint leaves no directory.

    ``supervise`` (``rlflow run``): fork a parent that cleans up should this process die natively
    (``rlflow.runtime.supervise``); only for a process that exits when the run ends, not a test's."""
    console = console or RunConsole()
    rd, ckpt, lock = prepare_run_dir(loaded, project, run_dir, resume)
    if supervise:
        from rlflow.runtime.supervise import fork_driver

        fork_driver(lambda signum: _after_driver_death(rd, lock, signum))
    try:
        return _run_locked(loaded, project, rd, ckpt, force, console)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: a stop asked for, not a failure; what was logged stays
        exc.run_dir, exc.checkpoint = rd.path, checkpoints.latest(rd.checkpoints)  # for the console's last line
        raise
    except BaseException:
        if not _resumable(rd.path):
            lock.discard()
        raise
    finally:
        lock.release()


def _resumable(path: Path) -> bool:
    return checkpoints.latest(path / CHECKPOINTS) is not None


def _after_driver_death(rd: RunDir, lock: RunLock, signum) -> None:
    """In the supervising parent: the driver died of ``signum`` without cleaning up."""
    cause = f"the driver process died of {signum.name}" + (" (out of memory?)" if signum == 9 else "")
    ckpt = checkpoints.latest(rd.checkpoints)
    if ckpt is None:
        removed = bool(lock.created)
        lock.discard()
        said = f"{rd.path} removed: it had no checkpoint yet" if removed else f"{rd.path} has no checkpoint"
    else:
        said = f"{rd.path} is resumable from {ckpt.name}: continue with --resume {rd.path}"
    lock.release()
    print(f"error: {cause}; {said}", file=sys.stderr)


def _run_locked(loaded, project, rd: RunDir, ckpt: Path | None, force: bool, console: RunConsole) -> RunResult:
    from rlflow.plan.compile import compile_plan
    from rlflow.runtime.sinks import build_sinks
    from rlflow.runtime.step_loop import load_data, total_steps

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    spec = loaded.spec
    resolved = loaded.resolved_yaml()
    if ckpt is not None:
        checkpoints.check_resumable(checkpoints.read_resolved(ckpt), resolved, force)
    plan = compile_plan(spec)
    _warn_verl_order(spec, plan)
    done = int(checkpoints.read_state(ckpt)["global_step"]) if ckpt is not None else 0
    if spec.trainer.total_steps is not None:  # known before loading any data: refuse an empty resume at once
        _check_work_left(done, spec.trainer.total_steps)
    pipeline_dict = spec.model_dump(by_alias=True, mode="json")
    sinks = [console, *build_sinks(project.logging, rd.path, spec.name, pipeline_dict)]
    try:
        verb = f"resuming {spec.name} from step {done}" if ckpt is not None else f"running {spec.name}"
        console.header(f"{verb}: {rd.path}", run_facts(spec, plan, sinks))
        console.on_phase = lambda label, start, end: rd.append_startup(label, start, end, 0)

        with console.phase("load data") as phase:  # before Ray: a data error costs no start-up
            data = load_data(spec, project.root)
            console.total = total_steps(spec, data)
            phase.detail = data_facts(spec, data, console.total)
        if ckpt is not None:
            _check_work_left(done, total_steps(spec, data))
            rd.truncate_metrics_after(done)
        rd.write_resolved(resolved)

        with interrupts.guard():
            return _train_with_restarts(loaded, project, plan, rd, data, ckpt, resolved, sinks, console)
    finally:
        for sink in sinks:
            sink.close()


def import_torch() -> None:
    """The driver's step needs torch (its batches, verl's math): imported while the pools start, it
    stays out of the first step. (Loading the data needs none.)"""
    import torch  # noqa: F401


def _warn_verl_order(spec, plan) -> None:
    """One warning per way the plan departs from verl's PPOTrainerSync step; the run goes on."""
    from rlflow.check.verl_order import compare_with_verl

    report = compare_with_verl(spec, plan)
    for line in report.warnings():
        log.warning("%s", line)
    if not report.warnings():
        log.info("%s", report.summary())


def _check_work_left(done: int, total: int) -> None:
    if done >= total:
        raise ResumeError(
            f"nothing to train: the checkpoint is at step {done} and the pipeline stops at step {total} "
            "(raise trainer.total_steps with --set trainer.total_steps=N)"
        )


def _train_with_restarts(
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
