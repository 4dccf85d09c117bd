"""Where step metrics go besides the console: metrics.jsonl (always), and TensorBoard, W&B or MLflow.

A sink has ``log(step, metrics)``, ``close()`` and a ``name``; one that fails is dropped with a warning.
Design notes: docs/design/console.md.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.schemas.project import LoggingSettings, MlflowSettings, WandbSettings

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

    def __init__(self, run_dir: Path, settings: WandbSettings, pipeline_name: str, config: dict) -> None:
        import wandb

        mode = wandb_mode(settings.mode)
        if mode == "offline" and settings.mode is None and not os.environ.get("WANDB_MODE"):
            log.warning("W&B: not logged in (wandb login, or WANDB_API_KEY); logging offline under %s", run_dir)
        self.run = wandb.init(
            project=settings.project or pipeline_name,
            entity=settings.entity,
            name=settings.name or run_name(pipeline_name, run_dir),
            tags=settings.tags or None,
            config=config,
            dir=str(run_dir),
            mode=mode,
            id=wandb_run_id(run_dir),
            resume="allow",
        )

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


def wandb_mode(asked: str | None) -> str:
    """``asked`` (rlflow.yaml), else ``WANDB_MODE``, else online when W&B finds credentials here, else offline.

    The credentials are looked up the way ``wandb.login`` does, but silently: its "logged in as"
    message asks W&B's server for the user name (through a service process it starts), which
    costs seconds, or hangs where the network drops packets, before the run has even begun.
    """
    if asked:
        return asked
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    from wandb.sdk import wandb_login

    found, _ = wandb_login._login(prompt=False, verify=False, update_api_key=False, _silent=True)
    return "online" if found else "offline"


class MlflowSink:
    name = "mlflow"

    def __init__(self, run_dir: Path, settings: MlflowSettings, pipeline_name: str) -> None:
        import mlflow

        uri = settings.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or (run_dir / "mlruns").as_uri()
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(settings.experiment or pipeline_name)
        self.mlflow = mlflow
        self.run = mlflow.start_run(
            run_name=settings.run_name or run_name(pipeline_name, run_dir), tags=dict(settings.tags) or None
        )

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        clean = {k.replace("@", "_at_"): v for k, v in metrics.items() if isinstance(v, (int, float))}
        self.mlflow.log_metrics(clean, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


def wandb_run_id(run_dir: Path) -> str:
    """One W&B run id per run directory: its name (in W&B's id characters) and a hash of its absolute path."""
    import hashlib
    import re

    digest = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '-', run_dir.name)[:40]}-{digest}"


def run_name(pipeline_name: str, run_dir: Path) -> str:
    """``<pipeline name>-<run id>``: the default run name on W&B and MLflow."""
    return f"{pipeline_name}-{run_dir.name}"


def build_sinks(settings: LoggingSettings, run_dir: Path, pipeline_name: str, config: dict) -> list:
    """The sinks named in ``settings.sinks`` that start (the console and metrics.jsonl are always on)."""
    sinks: list = []
    starters = {
        "tensorboard": lambda: TensorBoardSink(run_dir / "tensorboard"),
        "wandb": lambda: WandbSink(run_dir, settings.wandb, pipeline_name, config),
        "mlflow": lambda: MlflowSink(run_dir, settings.mlflow, pipeline_name),
    }
    for name in settings.sinks:
        if name not in starters:
            continue  # console and jsonl are always on
        try:
            sinks.append(starters[name]())
        except Exception as exc:  # noqa: BLE001 - a sink's failure must not stop the run
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, whatever the library wrote
            fix = f"; pip install 'rlflow[{name}]'" if isinstance(exc, ImportError) else ""
            log.warning("metrics sink %r did not start (%s%s); going on without it", name, reason, fix)
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
