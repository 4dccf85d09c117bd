"""``rlflow run PIPELINE``: train.

Loads and validates the pipeline, then hands it to the runtime (``rlflow.runtime.launch``), which is imported
only inside the command. Design notes: docs/design/cli.md.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from rlflow.cli.extras import require_train
from rlflow.cli.positional_overrides import EXTRA_ARGUMENTS, reject_extra_arguments


def run(
    ctx: typer.Context,
    pipeline: Path = typer.Argument(..., help="Pipeline file (YAML, a Jinja2 template)."),
    set_: list[str] | None = typer.Option(
        None, "--set", "-s", help="name=value (template var) or dotted.path=value (field)."
    ),
    drops: list[str] | None = typer.Option(None, "--drop", help="Remove the stage of this name; repeatable."),
    sinks: list[str] | None = typer.Option(
        None,
        "--sink",
        help="Metrics sink for this run (tensorboard, wandb, mlflow), instead of rlflow.yaml's logging.sinks; "
        "repeatable. The console and metrics.jsonl are always on.",
    ),
    run_dir: str | None = typer.Option(None, "--run-dir", help="Run directory (default: <runs_dir>/<name>/<run id>)."),
    resume: str | None = typer.Option(None, "--resume", help="Continue a run: its directory, or `latest`."),
    force: bool = typer.Option(False, "--force", help="Resume even though the pipeline changed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only errors, warnings and the final summary."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Per-stage timings each step and the runtime's log."),
) -> None:
    """Train: run the pipeline's GRPO steps on Ray (an embedded local Ray unless rlflow.yaml names a cluster)."""
    reject_extra_arguments(ctx, [pipeline])
    if quiet and verbose:
        raise typer.BadParameter("choose one of --quiet and --verbose", param_hint="-q/-v")
    require_train("run")
    from rlflow.check import load_pipeline
    from rlflow.runtime.console import NORMAL, QUIET, VERBOSE, RunConsole
    from rlflow.schemas.project import load_project_config

    console = RunConsole(QUIET if quiet else VERBOSE if verbose else NORMAL)
    logging.basicConfig(level=logging.WARNING, handlers=[console.logging_handler()], force=True)
    logging.getLogger("rlflow").setLevel(logging.INFO if verbose else logging.WARNING)
    from rlflow.registry import import_plugins

    project = load_project_config()
    if sinks:
        project = project.with_sinks(sinks)
    import_plugins(project.plugins, project.root)
    loaded = load_pipeline(pipeline, set_ or (), project=project, drops=drops or ())
    from rlflow.cli.validate_report import warning_line

    for warning in loaded.warnings:
        typer.echo(warning_line(warning), err=True)
    from rlflow import cli
    from rlflow.runtime.interrupts import Terminated
    from rlflow.runtime.launch import run_pipeline

    try:
        result = run_pipeline(
            loaded,
            project,
            run_dir=run_dir,
            resume=resume,
            force=force,
            console=console,
            supervise=cli.standalone,
        )
    except KeyboardInterrupt as exc:
        # the runtime has already stopped workers and backends on its way out
        terminated = isinstance(exc, Terminated)
        checkpoint, where = getattr(exc, "checkpoint", None), getattr(exc, "run_dir", None)
        if checkpoint is not None:
            after = f"checkpoint {checkpoint.name} is complete (continue with --resume {where})"
        elif where is not None:
            after = f"no checkpoint was complete yet: {where} keeps what was logged, with nothing to resume from"
        else:
            after = "the run had not started"
        typer.echo(
            f"{'terminated (SIGTERM)' if terminated else 'interrupted'}: workers and backends were stopped; {after}",
            err=True,
        )
        raise typer.Exit(143 if terminated else 130) from None
    console.summary(result.last_step, result.run_dir)


def register(app: typer.Typer) -> None:
    app.command("run", context_settings=EXTRA_ARGUMENTS)(run)
