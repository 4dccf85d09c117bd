"""``rlflow schema``: the JSON Schema of the pipeline format, for editors and other tools.

Editors that speak JSON Schema (VS Code's YAML extension, JetBrains IDEs) then complete
keys, show field descriptions and flag typos as you type; docs/pipeline_format.md shows how
to hook it up. Only pydantic is imported, inside the command.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("schema")(schema)


def schema(
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the schema to this file."),
) -> None:
    """Print the JSON Schema of pipeline files."""
    from rlflow.check.json_schema import pipeline_json_schema

    text = json.dumps(pipeline_json_schema(), indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {output}", err=True)
