"""Where step metrics go: console (a rich progress bar on a terminal, plain lines otherwise),
metrics.jsonl (always, through the run directory), and optionally TensorBoard, wandb or mlflow.

wandb and mlflow are used only when installed and named in rlflow.yaml ``logging.sinks``; both
default to offline mode (``WANDB_MODE=offline``, a file store under the run directory) so a
run never phones home unless the user sets it up.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger("rlflow.runtime")
HEADLINE = {
    "critic/score/mean": "reward",
    "reward/acc": "acc",
    "actor/pg_loss": "pg_loss",
    "timing_s/step": "step_s",
}


class ConsoleSink:
    """A rich progress bar (step, reward mean, step time, ETA) on a TTY; one plain line per step otherwise."""

    def __init__(self, total_steps: int, start_step: int, stream=None) -> None:
        self.total = total_steps
        self.stream = stream or sys.stderr
        self.progress = None
        if self.stream.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]step"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self.task = self.progress.add_task("train", total=total_steps, completed=start_step - 1, info="")
            self.progress.start()

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        shown = "  ".join(f"{label}={_fmt(metrics[key])}" for key, label in HEADLINE.items() if key in metrics)
        vals = "  ".join(f"{k}={_fmt(v)}" for k, v in sorted(metrics.items()) if k.startswith("val-core/"))
        if self.progress is not None:
            self.progress.update(self.task, completed=step, info=shown)
            if vals:
                self.progress.console.print(f"step {step}: {vals}")
        else:
            print(f"[rlflow] step {step}/{self.total} {shown} {vals}".rstrip(), file=self.stream, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class TensorBoardSink:
    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    def __init__(self, run_dir: Path, project: str, config: dict) -> None:
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        self.run = wandb.init(project=project, dir=str(run_dir), config=config, reinit=True)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    def __init__(self, run_dir: Path, experiment: str) -> None:
        import mlflow

        if not os.environ.get("MLFLOW_TRACKING_URI"):
            mlflow.set_tracking_uri((run_dir / "mlruns").as_uri())
        mlflow.set_experiment(experiment)
        self.mlflow = mlflow
        self.run = mlflow.start_run()

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        clean = {k.replace("@", "_at_"): v for k, v in metrics.items() if isinstance(v, (int, float))}
        self.mlflow.log_metrics(clean, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


def build_sinks(names: list[str], run_dir: Path, pipeline_name: str, config: dict, total: int, start: int) -> list:
    """Console always (jsonl is the run directory's own); others when named and installed."""
    sinks: list = [ConsoleSink(total, start)]
    for name in names:
        try:
            if name == "tensorboard":
                sinks.append(TensorBoardSink(run_dir / "tensorboard"))
            elif name == "wandb":
                sinks.append(WandbSink(run_dir, pipeline_name, config))
            elif name == "mlflow":
                sinks.append(MlflowSink(run_dir, pipeline_name))
        except ImportError as exc:
            log.warning("metrics sink %r is configured but not installed (%s); skipping it", name, exc)
    return sinks


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class StepTimer:
    """Accumulates ``timing_s/<name>`` for one step."""

    def __init__(self) -> None:
        self.timing: dict[str, float] = {}

    @contextmanager
    def time(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timing[name] = self.timing.get(name, 0.0) + time.perf_counter() - start
