"""The project config, ``rlflow.yaml``: template vars, plugins, Ray, run directory, sinks, inventory.

It is found by walking up from the working directory, as git finds ``.git``; without one,
every setting has its default and the working directory is the project root. Relative
paths (in pipelines too) resolve against the root, so a run behaves the same from any
sub-folder of the project.

Design decisions:
- Strict and frozen like the pipeline models; errors are reported like pipeline errors
  (``rlflow.yaml:3:1: ray.adress: unknown key 'adress' (did you mean 'address'?)``).
- rlflow.yaml is plain YAML (not a template): it is where template values come from.
- Loading is pure: plugins are listed here but imported by whoever needs them
  (``import_project_plugins``), so a project file can be read without side effects.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from rlflow.errors import ConfigError, RegistryError
from rlflow.schemas.diagnostics import Diagnostic, format_path
from rlflow.schemas.validation import validation_diagnostics
from rlflow.schemas.yaml_loader import Positions, decode_text, parse_yaml

PROJECT_FILE = "rlflow.yaml"
Sink = Literal["console", "jsonl", "tensorboard", "wandb", "mlflow"]


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


class LoggingSettings(_Strict):
    sinks: list[Sink] = Field(default_factory=lambda: ["console", "jsonl"])


class InventoryNode(_Strict):
    """One machine of the cluster the pipelines will run on."""

    name: str
    gpus: int = Field(0, ge=0)
    cpus: int = Field(ge=1)


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

    def resolve(self, path: str | os.PathLike) -> Path:
        """A path from a config file: ``~`` expanded, relative paths taken from the project root."""
        p = Path(path).expanduser()
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
        if candidate.is_file():
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
    text, diagnostics = decode_text(_read(file, display), display)
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
            import_plugins([module])
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


def _read(file: Path, display: str) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise ConfigError([Diagnostic(display, 1, 1, "", f"cannot read: {exc.strerror or exc}")]) from None


def _display(file: Path) -> str:
    """A path as the user would type it: relative to the cwd when below it."""
    try:
        return str(file.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(file)
