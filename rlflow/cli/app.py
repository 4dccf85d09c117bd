"""The typer app behind ``rlflow``, assembled from one module per command.

Each command module exposes ``register(app)`` and keeps heavy imports (torch, ray) inside
its command functions, so ``rlflow --help`` starts fast.
"""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES = ("init", "validate", "schema", "graph", "run", "plot", "backend", "import_verl")

app = typer.Typer(
    name="rlflow",
    help="Declarative GRPO post-training on Ray: validate, draw and run one pipeline file.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"rlflow.cli.{_name}").register(app)
