"""The ``rlflow`` command's entry point.

A plain ``rlflow validate FILE...`` skips the CLI framework; everything else goes to the typer app.
Design notes: docs/design/cli.md.
"""

from __future__ import annotations

import gc
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
        gc.freeze()  # the process ends: its last collection need not walk every module and model it loaded
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
