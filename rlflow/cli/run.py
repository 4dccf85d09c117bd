"""``rlflow run PIPELINE``: train. Loads and validates the pipeline (every error at once), then
hands it to the runtime (rlflow.runtime.launch), which is imported only here, inside the
command, so that other commands stay light. ``--sink NAME`` (repeatable) picks this run's
metrics sinks instead of rlflow.yaml's ``logging.sinks``; ``--drop NAME`` removes a stage.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from rlflow.cli.extras import require_train


def run(
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
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log what the runtime does."),
) -> None:
    """Train: run the pipeline's GRPO steps on Ray (an embedded local Ray unless rlflow.yaml names a cluster)."""
    require_train("run")
    from rlflow.check import load_pipeline
    from rlflow.schemas.project import load_project_config

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="[rlflow] %(message)s")
    logging.getLogger("rlflow").setLevel(logging.INFO)
    from rlflow.registry import import_plugins

    project = load_project_config()
    if sinks:
        project = project.with_sinks(sinks)
    import_plugins(project.plugins)
    loaded = load_pipeline(pipeline, set_ or (), project=project, drops=drops or ())
    from rlflow.runtime.launch import run_pipeline

    try:
        result = run_pipeline(loaded, project, run_dir=run_dir, resume=resume, force=force)
    except KeyboardInterrupt:
        # the runtime has already stopped workers and backends on its way out
        typer.echo(
            "interrupted: workers and backends were stopped; the last complete checkpoint is usable "
            "(continue with --resume latest)",
            err=True,
        )
        raise typer.Exit(130) from None
    typer.echo(f"run finished at step {result.last_step}: {result.run_dir}")


def register(app: typer.Typer) -> None:
    app.command("run")(run)
