"""``rlflow init [DIR]``: write a starter project, so ``rlflow run`` works outside a clone of rlflow.

A copy of ``rlflow.assets``, all or nothing (``--force`` overwrites). Design notes: docs/design/cli.md.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from rlflow.cli.extras import TRAIN_MODULES, missing
from rlflow.errors import CannotWrite, TargetExists
from rlflow.io import why_unwritable

SKIPPED = ("__pycache__", "*.pyc")
NEXT_COMMANDS = (
    "rlflow validate pipelines/bird_grpo.yaml",
    "rlflow graph pipelines/bird_grpo.yaml",
    "rlflow run pipelines/bird_grpo.yaml",
)


def starter_files() -> list[Path]:
    """The starter project's files, relative to the shipped assets folder, in a stable order."""
    from rlflow.assets import ASSETS, STARTER_FILES

    files = []
    for name in STARTER_FILES:
        top = ASSETS / name
        found = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        files += [p.relative_to(ASSETS) for p in found if not any(p.match(s) or s in p.parts for s in SKIPPED)]
    return files


def write_project(directory: Path, force: bool = False) -> list[Path]:
    """Copy the starter project into ``directory``; the files written, relative to it.

    Raises ``TargetExists`` naming the files that exist when ``force`` is false.
    """
    from rlflow.assets import ASSETS

    files = starter_files()
    existing = [f for f in files if (directory / f).exists()]
    if existing and not force:
        shown = ", ".join(str(directory / f) for f in existing[:5]) + (" ..." if len(existing) > 5 else "")
        raise TargetExists(
            f"{directory}: {len(existing)} starter file(s) exist ({shown}); "
            "pick an empty folder, or pass --force to overwrite them"
        )
    for f in files:
        target = directory / f
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ASSETS / f, target)
        except OSError as exc:
            raise CannotWrite(why_unwritable(target, exc) + "; give a folder you can write to") from None
    return files


def init(
    directory: Path = typer.Argument(Path("."), help="Folder to write the project into (created if missing)."),
    force: bool = typer.Option(False, "--force", help="Overwrite starter files that exist."),
) -> None:
    """Write a starter project: rlflow.yaml, the default pipelines, a BIRD sample and a warm-start model."""
    if directory.exists() and not directory.is_dir():
        raise TargetExists(f"{directory}: exists and is not a folder; give a folder to write the project into")
    files = write_project(directory, force)
    typer.echo(f"wrote a starter project to {directory}:")
    for line in _summary(files):
        typer.echo(f"  {line}")
    here = directory.resolve() == Path.cwd().resolve()
    typer.echo("next:" if here else f"next, in {directory}:")
    for command in NEXT_COMMANDS:
        typer.echo(f"  {command}")
    if missing(TRAIN_MODULES):
        typer.echo("(`rlflow run` needs the training stack: pip install 'rlflow[train]')")


def _summary(files: list[Path]) -> list[str]:
    """One line per file at the top levels, one per data set or model folder (with its file count)."""
    lines: dict[str, int] = {}
    for f in files:
        key = str(Path(*f.parts[:2])) + ("/" if len(f.parts) > 2 else "")
        lines[key] = lines.get(key, 0) + 1
    return [f"{key} ({count} files)" if key.endswith("/") else key for key, count in lines.items()]


def register(app: typer.Typer) -> None:
    app.command("init")(init)
