"""The ``rlflow`` command: a typer app assembled from one module per command.

Each command module exposes ``register(app)`` and keeps heavy imports (torch, ray) inside
its command functions, so ``rlflow validate`` and ``rlflow --help`` start fast. Known errors
(``RlflowError``) become one-line messages and their exit code; ``RLFLOW_DEBUG=1`` shows the
traceback instead.
"""

from __future__ import annotations

import os
import sys

import typer

from rlflow.errors import RlflowError

COMMAND_MODULES = ("validate", "schema", "graph", "run", "plot", "backend")

app = typer.Typer(
    name="rlflow",
    help="Declarative GRPO post-training on Ray: validate, draw and run one pipeline file.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_commands() -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"rlflow.cli.{name}").register(app)


_register_commands()


def main() -> None:
    """Console-script entry point: known errors as one line and their exit code."""
    try:
        app()
    except RlflowError as exc:
        if os.environ.get("RLFLOW_DEBUG"):
            raise
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
