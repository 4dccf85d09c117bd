"""Errors users see. Each carries a message that names the part at fault and how to fix it.

The CLI turns these into one-line messages and an exit code, with no traceback unless
``RLFLOW_DEBUG=1``.
"""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass


def printable(text: str) -> str:
    """``text`` as one line a terminal shows as it is: control characters (newlines included), bidirectional
    overrides and other invisible format characters become ``\\uXXXX``, so a name a user or a file chose
    cannot break the line or reorder what is shown."""
    return "".join(
        f"\\u{ord(ch):04x}" if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs") else ch for ch in text
    )


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One configuration problem: where it is (file, line, col, dotted path), what is wrong, how to fix it.

    A problem found after loading (in the plan, or while starting a resource) has no file: it prints
    from its dotted path on.
    """

    file: str
    line: int
    col: int
    path: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}: " if self.file else ""
        what = f"{self.path}: {self.message}" if self.path else self.message
        return printable(where + what + (f" ({self.fix})" if self.fix else ""))

    def to_dict(self) -> dict:
        return asdict(self)


class RlflowError(Exception):
    """Base of every error rlflow reports to a user; ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class ConfigError(RlflowError):
    """A pipeline or project file is invalid. ``diagnostics`` holds every problem found."""

    exit_code = 2

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = list(diagnostics)
        wrong = [d for d in self.diagnostics if not isinstance(d, Diagnostic)]
        if wrong:
            raise TypeError(f"ConfigError takes Diagnostic objects, got {type(wrong[0]).__name__}: {wrong[0]!r}")
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class RegistryError(RlflowError):
    """An unknown or conflicting name in a registry (stage kinds, remote backends)."""

    exit_code = 2


class StageError(RlflowError):
    """A stage failed at run time; the message names the step, the stage, the resource and the worker."""


class StageTimeout(StageError):
    """A stage call outlived its watchdog."""


class RemoteCallFailed(StageError):
    """A remote backend answered a call with an error (its engine failed or refused the call).

    The backend is alive, so the runtime fails the stage rather than restarting the backend: a
    restart would meet the same failure again.
    """


class ResourceError(RlflowError):
    """The cluster cannot hold the pipeline's resources (the shortfall is named)."""


class ResumeError(RlflowError):
    """A resume was refused (nothing to train, or the pipeline changed)."""

    exit_code = 2


class ExportError(RlflowError):
    """A run's checkpoint cannot be exported (the run, the step and what there is instead are named)."""

    exit_code = 2


class BackendError(RlflowError):
    """A backend (local engine or remote server) failed or refused a call."""


class DataError(RlflowError):
    """A data file, database or prompt template is missing or invalid (the file and field are named)."""

    exit_code = 2


class ExtraMissing(RlflowError):
    """A command needs packages of an optional extra that is not installed (the pip install is named)."""

    exit_code = 2


class TargetExists(RlflowError):
    """A command would overwrite files that exist (they are named, with the flag that allows it)."""

    exit_code = 2


class CannotWrite(RlflowError):
    """An output path the user gave cannot be written (a file where a folder must be, a folder where a file
    must be, no permission)."""

    exit_code = 2


class RunDirInUse(RlflowError):
    """Another live run holds the run directory (its pid and host are named)."""

    exit_code = 2


class ClusterUnreachable(ResourceError):
    """The Ray cluster named in rlflow.yaml cannot be reached or refuses this driver (the address is named)."""


class NodesLackPaths(ResourceError):
    """Nodes of a joined cluster do not see the files the run's workers open, or its run directory (each node
    and path is named)."""
