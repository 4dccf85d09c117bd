"""What the rules look at and how they report: the parts of a pipeline that parsed, positioned.

``Subject`` (the sections that parsed) and ``Reporter`` (problems and warnings as ``Diagnostic``s).
Design notes: docs/design/schemas.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlflow.schemas.diagnostics import Diagnostic, format_path
from rlflow.schemas.pipeline import DRIVER, AlgorithmSpec, Pipeline, StageSpec, TrainerSpec
from rlflow.schemas.safe_yaml import Positions


@dataclass
class Subject:
    """The parts of a pipeline that parsed; ``spec`` is set only when all of it did."""

    stages: list[tuple[int, StageSpec]]
    resources: dict[str, Any]
    resource_names: set[str] | None  # every declared name, parsed or not; None when `resources` is broken
    algorithm: AlgorithmSpec | None
    trainer: TrainerSpec | None
    stages_complete: bool
    spec: Pipeline | None = None
    configs: dict[int, Any] = field(default_factory=dict)  # stage index -> parsed `with:` config

    def resource_type(self, name: str) -> str | None:
        if name == DRIVER:
            return DRIVER
        res = self.resources.get(name)
        return res.type if res is not None else None


class Reporter:
    """Builds positioned diagnostics for one file."""

    def __init__(self, file: str, positions: Positions) -> None:
        self.file, self.positions = file, positions
        self.diagnostics: list[Diagnostic] = []
        self.warnings: list[Diagnostic] = []

    def __call__(self, path: tuple, message: str, fix: str = "", at: str = "value") -> None:
        self.diagnostics.append(self._at(path, message, fix, at))

    def warn(self, path: tuple, message: str, fix: str = "", at: str = "value") -> None:
        """A warning: the pipeline stays valid, and validate and run print it."""
        self.warnings.append(self._at(path, message, fix, at))

    def _at(self, path: tuple, message: str, fix: str, at: str) -> Diagnostic:
        line, col = self.positions.locate(path, at)
        return Diagnostic(self.file, line, col, format_path(path), message, fix)
