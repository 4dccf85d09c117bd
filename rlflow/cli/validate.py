"""``rlflow validate PIPELINE...``: every problem of every file at once, in a fraction of a second.

Exit 0 when every file is valid, 2 when any is not; the work is ``rlflow.cli.validate_report``.
Design notes: docs/design/cli.md.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)


def validate(
    pipelines: list[Path] = typer.Argument(..., help="Pipeline files to check.", show_default=False),
    set_: list[str] | None = typer.Option(
        None, "--set", "-s", help="name=value (template variable) or dotted.path=value (field override); repeatable."
    ),
    drops: list[str] | None = typer.Option(
        None, "--drop", help="Remove the stage of this name (as --set stages.NAME=null); repeatable."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    resolved: bool = typer.Option(
        False, "--print", help="Print each valid file fully resolved (templates, base, --set, defaults) as YAML."
    ),
    check_paths: bool = typer.Option(
        True,
        "--check-paths/--no-check-paths",
        help="Check that the data files, databases folder and model directory exist and that the data loads "
        "(skip on a machine without them).",
    ),
    verl: bool = typer.Option(
        False,
        "--verl",
        help="Also compare each plan with the installed verl's PPOTrainerSync step (PPOTrainerSeparateAsync's "
        "trainer lane for trainer_mode separate_async) (order, conditions, cadence, step timer); differences are "
        "warnings, the exit code stays 0. Skipped when verl is not installed.",
    ),
) -> None:
    """Check pipeline files: YAML, templates, schema, the rules of a GRPO step and that the data and model exist."""
    from rlflow.cli.positional_overrides import print_override_error
    from rlflow.cli.validate_report import check_files, report

    if print_override_error(pipelines):
        raise typer.Exit(2)
    results = check_files(
        pipelines, set_ or (), check_paths=check_paths, drops=drops or (), resolved=resolved, verl=verl
    )
    code = report(results, as_json)
    if code:
        raise typer.Exit(code)
