"""The typer app behind ``rlflow``, assembled from one module per command.

Each command module exposes ``register(app)`` and keeps heavy imports inside its command functions.
Design notes: docs/design/cli.md.
"""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES = ("init", "validate", "schema", "graph", "run", "export", "plot", "backend", "import_verl")

app = typer.Typer(
    name="rlflow",
    help="Declarative GRPO post-training on Ray: validate, draw and run one pipeline file.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from rlflow import __version__

        typer.echo(f"rlflow {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_print_version, is_eager=True, help="Print rlflow's version and exit."
    ),
) -> None:
    """Global options (the app's help text above is what ``rlflow --help`` shows)."""


for _name in COMMAND_MODULES:
    importlib.import_module(f"rlflow.cli.{_name}").register(app)
