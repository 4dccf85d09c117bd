"""The ``rlflow`` command's entry point.

A plain ``rlflow validate FILE...`` (the check people run before every launch and in
pre-commit hooks) goes straight to ``rlflow.cli.validate_report`` without importing the CLI
framework; everything else, ``--help`` included, goes to the typer app in ``rlflow.cli.app``.
Known errors (``RlflowError``) become one-line messages and their exit code;
``RLFLOW_DEBUG=1`` shows the traceback instead.
"""

from __future__ import annotations

import os
import sys

import rlflow.cli
from rlflow.errors import ConfigError, RlflowError, printable


def main() -> None:
    """Console-script entry point: known errors as one line and their exit code."""
    from rlflow.cli.validate_report import fast_path

    rlflow.cli.standalone = True

    code = fast_path(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from rlflow.cli.app import app

    try:
        app(prog_name="rlflow")
    except RlflowError as exc:
        if os.environ.get("RLFLOW_DEBUG"):
            raise
        print(f"error: {exc if isinstance(exc, ConfigError) else printable(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":  # pragma: no cover
    main()
