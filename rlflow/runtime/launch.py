"""``run_pipeline``: everything ``rlflow run`` does, from a loaded pipeline to a finished run.

Lock the run directory (``run_dir_choice``), compile the plan and compare it with verl's step, load
the data on the driver, then train on Ray (``restarts``). Whatever happens the lock is released and a run
that fails before its first checkpoint leaves no directory. Design notes: docs/design/launch.md.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from rlflow.errors import ResumeError
from rlflow.runtime import checkpoints, interrupts
from rlflow.runtime.console import RunConsole
from rlflow.runtime.restarts import RunResult, train_on_ray
from rlflow.runtime.run_dir import RunDir
from rlflow.runtime.run_dir_choice import prepare_run_dir, resumable
from rlflow.runtime.run_facts import data_facts, run_facts
from rlflow.runtime.run_lock import RunLock

__all__ = ["RunResult", "run_pipeline"]

log = logging.getLogger("rlflow.runtime")


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
        if not resumable(rd.path):
            lock.discard()
        raise
    finally:
        lock.release()


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
            return train_on_ray(loaded, project, plan, rd, data, ckpt, resolved, sinks, console)
    finally:
        for sink in sinks:
            sink.close()


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
