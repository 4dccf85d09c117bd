"""``rlflow export RUN_DIR [--step N] [--model policy|critic] -o DIR``: a run's trained model as a Hugging Face
directory.

The work is ``rlflow.runtime.hf_export``. Design notes: docs/design/cli.md.
"""

from __future__ import annotations

from pathlib import Path

import typer

from rlflow.cli.extras import require_train


def export(
    run_dir: Path = typer.Argument(..., help="Run directory (runs/<pipeline>/<run id>)."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder to write the model to (new or empty)."),
    step: int | None = typer.Option(None, "--step", help="The checkpoint's step (default: the latest complete one)."),
    model: str = typer.Option(
        "policy", "--model", help="policy, or critic (the value model of a gae run: AutoModelForTokenClassification)."
    ),
) -> None:
    """Export a run's checkpoint as a Hugging Face model directory (weights in the model's dtype, config, tokenizer)."""
    require_train("export", ("torch", "transformers", "safetensors"))
    from rlflow.registry import import_plugins
    from rlflow.runtime.hf_export import export_run
    from rlflow.schemas.project import load_project_config

    project = load_project_config()
    import_plugins(project.plugins, project.root)  # their stage kinds name the resource that wrote the checkpoint
    done = export_run(run_dir, output, step, model)
    which = "" if model == "policy" else f"the {model} of "
    typer.echo(f"exported {which}step {done.step} of {run_dir} ({done.dtype}) to {done.out}")
    if done.note:
        typer.echo(f"note: {done.note}", err=True)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
