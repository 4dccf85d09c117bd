"""Atomic checkpoints and exact resume.

A checkpoint is written under ``.tmp-step_<N>/`` and renamed to ``step_<N>`` once whole; resume refuses a
changed pipeline unless forced. Design notes: docs/design/checkpoints.md.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from rlflow.errors import ResumeError
from rlflow.schemas.safe_yaml import parse_yaml, read_config

STATE_FILE = "trainer_state.json"
TMP_PREFIX = ".tmp-"
# Knobs a resume may change without changing what the steps compute.
RESUMABLE_CHANGES = {
    "trainer.total_steps",
    "trainer.total_epochs",
    "trainer.save_freq",
    "trainer.test_freq",
    "trainer.keep_checkpoints",
    "trainer.max_restarts",
    "trainer.stage_timeout_s",
    "trainer.val_before_train",
}


def step_dir(checkpoints: Path, step: int) -> Path:
    return checkpoints / f"step_{step}"


def begin(checkpoints: Path, step: int) -> Path:
    """A fresh temporary directory for the checkpoint of ``step``."""
    tmp = checkpoints / f"{TMP_PREFIX}step_{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def commit(checkpoints: Path, tmp: Path, step: int, trainer_state: dict[str, Any], keep: int) -> Path:
    """Write the trainer state, fsync everything, rename into place, drop old checkpoints."""
    state_path = tmp / STATE_FILE
    state_path.write_text(json.dumps(trainer_state, indent=1, sort_keys=True))
    _fsync_tree(tmp)
    final = step_dir(checkpoints, step)
    if final.exists():  # re-running a step after a restart: replace the old copy atomically enough
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(checkpoints)
    for old in complete_checkpoints(checkpoints)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def abort(tmp: Path) -> None:
    shutil.rmtree(tmp, ignore_errors=True)


def complete_checkpoints(checkpoints: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not checkpoints.is_dir():
        return []
    found = []
    for path in checkpoints.iterdir():
        if path.name.startswith("step_") and (path / STATE_FILE).exists():
            try:
                found.append((int(path.name.removeprefix("step_")), path))
            except ValueError:
                continue
    return [p for _, p in sorted(found)]


def sweep_partial(checkpoints: Path) -> list[str]:
    """Remove checkpoints a crash left half-written; returns their names."""
    removed = []
    if checkpoints.is_dir():
        for path in checkpoints.iterdir():
            if path.name.startswith(TMP_PREFIX):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
    return removed


def latest(checkpoints: Path) -> Path | None:
    found = complete_checkpoints(checkpoints)
    return found[-1] if found else None


def read_state(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / STATE_FILE).read_text())


def disk_full_reason(checkpoints: Path, exc: BaseException) -> str | None:
    """A plain explanation when a checkpoint failed for want of disk space, else None.

    Writers deep in torch report a full disk in their own words ("unexpected pos ..."), so the
    free space is measured rather than the message parsed: too little room for another copy of
    the last checkpoint (or under 64 MiB when there is none) means the disk is the cause.
    """
    import errno

    free = shutil.disk_usage(checkpoints).free
    last = latest(checkpoints)
    needed = sum(f.stat().st_size for f in last.rglob("*") if f.is_file()) if last else 64 << 20
    no_space = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    if not no_space and free >= needed:
        return None
    return (
        f"No space left on device for the checkpoint under {checkpoints}: {free / 2**20:.0f} MiB free, "
        f"a checkpoint takes about {needed / 2**20:.0f} MiB (free space, lower trainer.keep_checkpoints, "
        f"or write runs elsewhere with --run-dir / runs_dir); the last complete checkpoint is intact"
    )


def read_resolved(checkpoint: Path) -> str:
    """The text of ``checkpoint``'s pipeline.resolved.yaml, read bounded; ResumeError naming it when unreadable."""
    file = checkpoint / "pipeline.resolved.yaml"
    text, problems = read_config(file, str(file), "checkpoint's pipeline")
    if text is None:
        raise ResumeError(f"{problems[0]}; the checkpoint is damaged, resume from another run or start afresh")
    return text


def pipeline_differences(old_yaml: str, new_yaml: str) -> list[str]:
    """Dotted paths whose values differ between two resolved pipelines, minus the resumable knobs."""
    old, _, problems = parse_yaml(old_yaml, "the checkpoint's pipeline.resolved.yaml")
    if problems:  # an alias bomb, say: compared as it stands it would be walked a billion times
        raise ResumeError(f"{problems[0]}; the checkpoint is damaged, resume from another run or start afresh")
    old, new = old or {}, parse_yaml(new_yaml, "pipeline.resolved.yaml")[0] or {}  # both read alike
    diffs: list[str] = []
    _diff(old, new, "", diffs)
    return [d for d in diffs if d.split(":", 1)[0] not in RESUMABLE_CHANGES]


def check_resumable(old_yaml: str, new_yaml: str, force: bool) -> None:
    diffs = pipeline_differences(old_yaml, new_yaml)
    if diffs and not force:
        listed = "; ".join(diffs[:20]) + ("; ..." if len(diffs) > 20 else "")
        raise ResumeError(
            f"the pipeline changed since the checkpoint was written: {listed}. "
            "Resume with the original settings, or pass --force to resume anyway."
        )


def _diff(old: Any, new: Any, path: str, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            _diff(old.get(key), new.get(key), f"{path}.{key}" if path else str(key), out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            _diff(a, b, f"{path}.{i}", out)
    elif old != new:
        out.append(f"{path}: {old!r} -> {new!r}")


def _fsync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
