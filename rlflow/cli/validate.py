"""``rlflow validate PIPELINE...``: every problem of every file at once, in a fraction of a second.

Exit 0 when every file is valid, 2 when any is not. Problems print one per line as
``file:line:col: path: problem (fix)`` on stderr; ``--json`` prints one JSON document on
stdout instead. The work is ``rlflow.cli.validate_files``, which imports only the pure
layers (pydantic, PyYAML, Jinja2) and never torch, Ray, verl or transformers (a test runs it
in a subprocess and inspects sys.modules); a plain command line reaches it without typer.
``--no-check-paths`` skips the check that the data files, databases and model directory exist.
``--print`` prints each valid file fully resolved (templates rendered, ``base:`` merged,
``--set`` and ``--drop`` applied, every default spelled out) as YAML on stdout: what a run
would save as pipeline.resolved.yaml. ``--drop NAME`` removes a stage (as
``--set stages.NAME=null`` does); the rules then check what is left.
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
        help="Check that the data files, databases folder and model directory exist (skip on a machine without them).",
    ),
) -> None:
    """Check pipeline files: YAML, templates, schema, the rules of a GRPO step and that the data and model exist."""
    from rlflow.cli.validate_files import check_files, report

    results = check_files(pipelines, set_ or (), check_paths=check_paths, drops=drops or (), resolved=resolved)
    code = report(results, as_json)
    if code:
        raise typer.Exit(code)
