"""Where step metrics go besides the console (``rlflow.runtime.console``): metrics.jsonl (always,
through the run directory), and optionally TensorBoard, wandb or mlflow, each under its full
verl metric names. A sink has ``log(step, metrics)``, ``close()`` and a ``name`` for the run's header.

wandb and mlflow are used only when installed and named in rlflow.yaml ``logging.sinks``; both
default to offline mode (``WANDB_MODE=offline``, a file store under the run directory) so a
run never phones home unless the user sets it up.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger("rlflow.runtime")


class TensorBoardSink:
    name = "tensorboard"

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
    name = "wandb"

    def __init__(self, run_dir: Path, project: str, config: dict) -> None:
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        self.run = wandb.init(project=project, dir=str(run_dir), config=config, reinit=True)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    name = "mlflow"

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


def build_sinks(names: list[str], run_dir: Path, pipeline_name: str, config: dict) -> list:
    """The sinks named in rlflow.yaml that are installed (the console and jsonl are always there)."""
    sinks: list = []
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
