"""The run directory: the contract between a run and everything that reads it.

``<runs_dir>/<pipeline name>/<run id>/``: the resolved pipeline, metrics, traces, checkpoints, logs and the lock.
Design notes: docs/design/run_dir.md.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

RESOLVED = "pipeline.resolved.yaml"
WORKERS = "workers.json"
METRICS = "metrics.jsonl"
TRACE = "trace.jsonl"
STARTUP = "startup.jsonl"
TRANSCRIPTS = "transcripts.jsonl"
CHECKPOINTS = "checkpoints"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid() % 100000:05d}"


def latest_run(runs_dir: Path, pipeline_name: str) -> Path | None:
    """The most recently modified run of this pipeline, or None."""
    root = runs_dir / pipeline_name
    runs = [p for p in root.glob("*") if (p / RESOLVED).exists()] if root.is_dir() else []
    return max(runs, key=lambda p: (p / RESOLVED).stat().st_mtime, default=None)


class RunDir:
    """Writers for one run's files.

    ``path`` is made absolute: checkpoint folders are handed to workers and remote backends, which
    may run in another working directory (the reference server runs in the project root).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path).absolute()
        self.checkpoints = self.path / CHECKPOINTS
        self.path.mkdir(parents=True, exist_ok=True)
        self.checkpoints.mkdir(exist_ok=True)

    def write_resolved(self, text: str) -> None:
        (self.path / RESOLVED).write_text(text)

    def write_workers(self, workers: dict[str, list[dict[str, Any]]]) -> None:
        """Where each resource's workers run (pid, host, node, rank): the answer to 'where did it land?'."""
        (self.path / WORKERS).write_text(json.dumps(workers, indent=1, sort_keys=True))

    def append_metrics(self, record: dict[str, Any]) -> None:
        _append(self.path / METRICS, record)

    def append_trace(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            _append(self.path / TRACE, record)

    def append_startup(self, phase: str, start: float, end: float, attempt: int) -> None:
        """A start-up phase (wall-clock seconds); ``attempt`` counts restarts, as in trace.jsonl."""
        _append(self.path / STARTUP, {"phase": phase, "start": start, "end": end, "attempt": attempt})

    def append_transcripts(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            _append(self.path / TRANSCRIPTS, record)

    def truncate_metrics_after(self, step: int) -> int:
        """Drop metric lines (and transcripts) of steps after ``step`` (they will be re-run); returns how many
        metric lines were dropped."""
        _truncate_after(self.path / TRANSCRIPTS, step)
        return _truncate_after(self.path / METRICS, step)


def _truncate_after(path: Path, step: int) -> int:
    """Drop the lines of ``path`` whose step is after ``step``; how many were dropped."""
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a torn last line from a crash
            dropped += 1
            continue
        if record.get("step", 0) > step:
            dropped += 1
        else:
            kept.append(line)
    path.write_text("".join(k + "\n" for k in kept))
    return dropped


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(record, sort_keys=True, allow_nan=True) + "\n")
        fh.flush()
