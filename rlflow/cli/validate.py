"""``rlflow validate PIPELINE...``: every problem of every file at once, in a fraction of a second.

Exit 0 when every file is valid, 2 when any is not. Problems print one per line as
``file:line:col: path: problem (fix)`` on stderr; ``--json`` prints one JSON document on
stdout instead. The work is ``rlflow.cli.validate_files``, which imports only the pure
layers (pydantic, PyYAML, Jinja2) and never torch, Ray, verl or transformers (a test runs it
in a subprocess and inspects sys.modules); a plain command line reaches it without typer.
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
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Check pipeline files: YAML, templates, schema and the rules of a GRPO step."""
    from rlflow.cli.validate_files import check_files, report

    code = report(check_files(pipelines, set_ or ()), as_json)
    if code:
        raise typer.Exit(code)
