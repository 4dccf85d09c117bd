"""Which optional extra a command needs, checked before the command imports it.

A missing extra is one line naming the pip install (exit 2). Design notes: docs/design/cli.md.
"""

from __future__ import annotations

import importlib.util

from rlflow.errors import ExtraMissing

# the modules the `train` extra installs (pyproject.toml [project.optional-dependencies] train)
TRAIN_MODULES = ("torch", "transformers", "tokenizers", "ray", "verl", "numpy", "pyarrow", "msgpack", "psutil")
PLOT_MODULES = ("matplotlib",)


def missing(modules: tuple[str, ...]) -> list[str]:
    """The names in ``modules`` that cannot be imported here."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def require_train(command: str, modules: tuple[str, ...] = TRAIN_MODULES) -> None:
    """Raise ``ExtraMissing`` naming ``command`` and ``pip install 'rlflow[train]'`` when a module is missing."""
    absent = missing(modules)
    if absent:
        raise ExtraMissing(
            f"`rlflow {command}` needs the training stack ({', '.join(absent)} not installed): "
            "pip install 'rlflow[train]'"
        )
