"""The project config, ``rlflow.yaml``: template vars, plugins, Ray, run directory, sinks, inventory.

Found by walking up from the working directory; relative paths resolve against its folder.
Design notes: docs/design/schemas.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from rlflow.assets import builtin_path
from rlflow.errors import ConfigError, RegistryError
from rlflow.schemas.diagnostics import Diagnostic, format_path, suggestion
from rlflow.schemas.labels import label_key_problem, resource_problem
from rlflow.schemas.safe_yaml import Positions, parse_yaml, read_config
from rlflow.schemas.schema_errors import validation_diagnostics

PROJECT_FILE = "rlflow.yaml"
Sink = Literal["console", "jsonl", "tensorboard", "wandb", "mlflow"]
SINKS: tuple[str, ...] = get_args(Sink)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RaySettings(_Strict):
    """How to reach Ray: no address starts an embedded local Ray (whatever RAY_ADDRESS says); ``auto`` joins a
    cluster running on this machine, ``host:port`` the one there (docs/cluster.md)."""

    address: str | None = None
    namespace: str | None = Field(None, description="Ray namespace (Ray's anonymous one when unset).")
    init: dict[str, Any] = Field(default_factory=dict, description="Extra keyword arguments for ray.init.")
    num_cpus: int | None = Field(None, gt=0, description="CPUs of an embedded local Ray.")
    connect_timeout_s: float = Field(30.0, gt=0, description="How long joining `address` may take to answer.")
    placement_timeout_s: float = Field(
        60.0,
        gt=0,
        description="How long a run waits for room its pools need that exists on the cluster but is held "
        "(by another job, or a pool that is being placed) before it is refused, naming the shortfall.",
    )


class WandbSettings(_Strict):
    """Where a run logs on Weights & Biases (``logging.sinks`` must name ``wandb``)."""

    project: str | None = Field(None, description="W&B project (default: the pipeline's name).")
    entity: str | None = Field(None, description="W&B team or user (default: your default entity).")
    name: str | None = Field(None, description="Run name (default: <pipeline name>-<run id>).")
    tags: list[str] = Field(default_factory=list, description="Tags of every run.")
    mode: Literal["online", "offline", "disabled"] | None = Field(
        None,
        description="Default: WANDB_MODE when set, else online when logged in (wandb login, WANDB_API_KEY), else offline.",
    )


class MlflowSettings(_Strict):
    """Where a run logs on MLflow (``logging.sinks`` must name ``mlflow``)."""

    tracking_uri: str | None = Field(
        None, description="Tracking server or store (default: MLFLOW_TRACKING_URI, else mlruns/ in the run directory)."
    )
    experiment: str | None = Field(None, description="Experiment (default: the pipeline's name).")
    run_name: str | None = Field(None, description="Run name (default: <pipeline name>-<run id>).")
    tags: dict[str, str] = Field(default_factory=dict, description="Tags of every run.")


class LoggingSettings(_Strict):
    """Where step metrics go: console and jsonl always; tensorboard, wandb, mlflow when named."""

    sinks: list[Sink] = Field(default_factory=lambda: ["console", "jsonl"])
    wandb: WandbSettings = WandbSettings()
    mlflow: MlflowSettings = MlflowSettings()


class InventoryNode(_Strict):
    """One machine of the cluster the pipelines will run on; ``labels`` and ``resources`` as its ``ray start``
    gives them (``--labels``, ``--resources``), for the pools pinned to nodes."""

    name: str
    gpus: int = Field(0, ge=0)
    cpus: int = Field(ge=1)
    gpu_memory_gb: float | None = Field(
        None, gt=0, description="The memory of each of its GPUs, in GB (GiB); null: unknown, no memory check."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="The node's Ray labels.")
    resources: dict[str, float] = Field(default_factory=dict, description="The node's custom Ray resources.")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        problems = [p for p in map(label_key_problem, value) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, float]) -> dict[str, float]:
        problems = [p for p in (resource_problem(name, amount) for name, amount in value.items()) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return value


class Inventory(_Strict):
    """The cluster, when known: validation then checks that every resource fits."""

    nodes: list[InventoryNode] = Field(min_length=1)


class ProjectConfig(_Strict):
    """The contents of rlflow.yaml, plus where it was found (``root``)."""

    vars: dict[str, Any] = Field(default_factory=dict, description="Template variables for pipelines.")
    plugins: list[str] = Field(default_factory=list, description="Modules to import (stage kinds, remote backends).")
    ray: RaySettings = RaySettings()
    runs_dir: str = "runs"
    logging: LoggingSettings = LoggingSettings()
    inventory: Inventory | None = None

    _root: Path = PrivateAttr(default_factory=Path.cwd)
    _file: Path | None = PrivateAttr(default=None)
    _positions: Positions = PrivateAttr(default_factory=Positions)

    @property
    def root(self) -> Path:
        """The folder holding rlflow.yaml, else the working directory it was looked for from."""
        return self._root

    @property
    def file(self) -> Path | None:
        """The rlflow.yaml this came from (None when there is none)."""
        return self._file

    def with_sinks(self, names: list[str]) -> ProjectConfig:
        """This config with ``logging.sinks`` replaced (``rlflow run --sink``); an unknown name is a ConfigError."""
        unknown = [name for name in names if name not in SINKS]
        if unknown:
            fix = suggestion(unknown[0], list(SINKS)) or f"sinks: {', '.join(SINKS)}"
            raise ConfigError([Diagnostic("", 0, 0, "--sink", f"unknown metrics sink {unknown[0]!r}", fix)])
        logging = self.logging.model_copy(update={"sinks": list(dict.fromkeys(names))})
        return self.model_copy(update={"logging": logging})

    def resolve(self, path: str | os.PathLike) -> Path:
        """A path from a config file: a packaged ``builtin:`` path, ``~`` expanded, relative paths taken from
        the project root. ValueError for an unknown ``builtin:`` name."""
        p = builtin_path(path) or Path(os.path.expanduser(path))
        return p if p.is_absolute() else self._root / p

    def diagnostic(self, path: tuple, message: str, fix: str = "") -> Diagnostic:
        """A diagnostic positioned in rlflow.yaml (line 1 when the file does not exist)."""
        line, col = self._positions.locate(path)
        return Diagnostic(_display(self._file or self._root / PROJECT_FILE), line, col, format_path(path), message, fix)


def find_project_file(start: Path | None = None) -> Path | None:
    """The nearest rlflow.yaml in ``start`` (default: cwd) or a folder above it."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / PROJECT_FILE
        if candidate.exists():  # a folder or a FIFO of that name is found, then refused when read
            return candidate
    return None


def load_project_config(start: Path | None = None) -> ProjectConfig:
    """Find and load rlflow.yaml above ``start`` (default: cwd); defaults when there is none.

    Raises ConfigError with every problem found in the file.
    """
    start = (start or Path.cwd()).resolve()
    start = start.parent if start.is_file() else start
    file = find_project_file(start)
    if file is None:
        config = ProjectConfig()
        config._root = start
        return config
    display = _display(file)
    text, diagnostics = read_config(file, display, PROJECT_FILE)
    data, positions = None, Positions()
    if text is not None:
        data, positions, diagnostics = parse_yaml(text, display)
    data = {} if data is None and not diagnostics else data
    if not diagnostics and not isinstance(data, dict):
        diagnostics = [
            Diagnostic(
                display, 1, 1, "", f"{PROJECT_FILE} must be a mapping of settings", "see docs/pipeline_format.md"
            )
        ]
    if diagnostics:
        raise ConfigError(diagnostics)
    try:
        config = ProjectConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_diagnostics(exc, ProjectConfig, data, positions, display)) from None
    config._root, config._file, config._positions = file.parent, file, positions
    _check_inventory(config)
    return config


def import_project_plugins(config: ProjectConfig) -> list[Diagnostic]:
    """Import the modules listed under ``plugins`` (they register stage kinds and backends)."""
    from rlflow.registry import import_plugins

    problems = []
    for i, module in enumerate(config.plugins):
        try:
            import_plugins([module], config.root)
        except RegistryError as exc:
            problems.append(config.diagnostic(("plugins", i), str(exc)))
    return problems


def _check_inventory(config: ProjectConfig) -> None:
    if config.inventory is None:
        return
    seen: dict[str, int] = {}
    problems = []
    for i, node in enumerate(config.inventory.nodes):
        if node.name in seen:
            problems.append(
                config.diagnostic(
                    ("inventory", "nodes", i, "name"),
                    f"duplicate node name {node.name!r} (also nodes[{seen[node.name]}])",
                )
            )
        seen.setdefault(node.name, i)
    if problems:
        raise ConfigError(problems)


def _display(file: Path) -> str:
    """A path as the user would type it: relative to the cwd when below it."""
    try:
        return str(file.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(file)
