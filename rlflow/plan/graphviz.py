"""Draw DOT source to SVG or PNG with Graphviz's ``dot`` binary.

Without it, ``GraphvizMissing`` carries the install command. Design notes: docs/design/plan_render.md.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from rlflow.errors import RlflowError

FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf"}
INSTALL_HINT = "install Graphviz: `apt-get install graphviz` (Debian/Ubuntu) or `brew install graphviz` (macOS)"


class GraphvizMissing(RlflowError):
    """The ``dot`` binary is not on PATH."""


class GraphvizFailed(RlflowError):
    """``dot`` ran but could not draw the graph."""


def output_format(path: Path) -> str:
    """The Graphviz format for ``path``'s suffix; an error naming the suffixes it knows otherwise."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        known = ", ".join(FORMATS)
        raise RlflowError(f"cannot draw {str(path)!r}: unknown suffix {path.suffix or '(none)'!r}; use one of {known}")
    return fmt


def render_graphviz(dot_source: str, output: Path, timeout_s: float = 60.0) -> Path:
    """Run ``dot`` on ``dot_source`` and write ``output`` (format by suffix)."""
    fmt = output_format(output)
    binary = shutil.which("dot")
    if binary is None:
        raise GraphvizMissing(f"Graphviz's `dot` was not found on PATH; {INSTALL_HINT}")
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [binary, f"-T{fmt}", "-o", str(output)],
            input=dot_source.encode(),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GraphvizFailed(f"`dot` did not finish drawing {str(output)!r} within {timeout_s:g} s") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"
        raise GraphvizFailed(f"`dot` could not draw {str(output)!r}: {message}")
    return output
