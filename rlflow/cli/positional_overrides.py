"""Hydra-style ``key=value`` arguments where a command takes pipeline files: one line that names ``--set``.

Typer-free, so ``rlflow validate``'s fast path can use it. Design notes: docs/design/cli.md.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

# Hydra's override grammar: key=value, +key=value, ++key=value (add), ~key (delete)
_OVERRIDE = re.compile(r"(\+{1,2})?[A-Za-z_][\w-]*(\.[\w-]+|\[\d+\])*=.*", re.DOTALL)
_DELETE = re.compile(r"~[A-Za-z_][\w.-]*")


def override_error(args: Iterable[object]) -> str | None:
    """The error for the first argument that is a Hydra-style override rather than a file, else None."""
    for arg in args:
        text = str(arg)
        if Path(text).exists():
            continue
        if _OVERRIDE.fullmatch(text):
            bare = text.lstrip("+")
            return f"{text!r} is a Hydra-style override, not a pipeline file: did you mean --set {bare}?"
        if _DELETE.fullmatch(text):
            return f"{text!r} is a Hydra-style deletion, not a pipeline file: --set cannot delete a key; edit the file"
    return None


def print_override_error(args: Iterable[object]) -> bool:
    """Print ``error: ...`` on stderr for a Hydra-style argument; True when there was one (exit 2 then)."""
    message = override_error(args)
    if message is not None:
        print(f"error: {message}", file=sys.stderr)
    return message is not None


# typer commands taking one pipeline file accept extra arguments, so that a Hydra-style one gets
# the answer above rather than click's "Got unexpected extra argument"
EXTRA_ARGUMENTS = {"allow_extra_args": True}


def reject_extra_arguments(ctx, given: list[object]) -> None:
    """For a typer command with ``EXTRA_ARGUMENTS``: exit 2 naming ``--set`` for a Hydra-style argument
    among ``given`` and the extra ones, or fail as click does for any other extra argument."""
    if print_override_error([*given, *ctx.args]):
        import typer

        raise typer.Exit(2)
    if ctx.args:
        ctx.fail(f"Got unexpected extra argument{'s' * (len(ctx.args) > 1)} ({' '.join(ctx.args)})")
