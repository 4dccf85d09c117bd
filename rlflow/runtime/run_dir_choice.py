"""Which run directory a run writes, locked before anything is read or written there, and, when resuming,
the checkpoint it starts from."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from rlflow.errors import CannotWrite, ResumeError, RunDirInUse
from rlflow.runtime import checkpoints
from rlflow.runtime.run_dir import CHECKPOINTS, RunDir, latest_run, new_run_id
from rlflow.runtime.run_lock import RunLock, claim_run_dir, holders, sweep_abandoned

log = logging.getLogger("rlflow.runtime")


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
    sweep_abandoned(runs_dir / name, resumable)
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


def resumable(path: Path) -> bool:
    return checkpoints.latest(path / CHECKPOINTS) is not None
