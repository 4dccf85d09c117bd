"""Diagnostics: one problem in a file the user wrote, positioned at a line and column.

Every error that validation finds becomes a ``Diagnostic`` (defined with ``ConfigError`` in
``rlflow.errors``, the one type every layer reports configuration problems with); ``ConfigError``
carries all of them at once. The text form is ``file:line:col: dotted.path: problem (fix)``, which editors
and terminals turn into clickable links.

Design decisions:
- A path is a tuple of keys (str) and list indices (int); it prints as ``stages[2].on``.
  ``parse_path`` reads both that form and the ``stages.2.on`` form that ``--set`` and other
  layers use, so anybody can hand us a dotted path.
- Every diagnostic carries a file and a line (1-based). When no exact spot exists (a missing
  key, a whole-pipeline rule), the nearest enclosing mapping is used.
- ``fix`` is a short hint ("did you mean 'x'?", "set on: actor_pool"); it prints in
  parentheses after the problem.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from rlflow.errors import Diagnostic
from rlflow.registry import did_you_mean

__all__ = ["Diagnostic", "format_path", "parse_path", "short_repr", "sort_unique", "suggestion"]


def format_path(path: Sequence) -> str:
    """``("stages", 2, "on")`` -> ``stages[2].on``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


_PATH_TOKEN = re.compile(r"\[(\d+)\]|([^.\[\]]+)")


def parse_path(text: str) -> tuple:
    """``stages[2].on`` or ``stages.2.on`` -> ``("stages", 2, "on")`` (all-digit parts are indices)."""
    parts: list = []
    for index, key in _PATH_TOKEN.findall(text):
        if index:
            parts.append(int(index))
        elif key.isdigit():
            parts.append(int(key))
        else:
            parts.append(key)
    return tuple(parts)


def suggestion(name: object, known: Iterable[str]) -> str:
    """``did you mean 'x'?`` for the closest known name, else ''."""
    hint = did_you_mean(str(name), sorted(set(known)))
    return hint.strip()[1:-1] if hint else ""


def short_repr(value: object, limit: int = 60) -> str:
    """A repr short enough for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sort_unique(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Diagnostics in file order, each reported once."""
    return sorted(set(diagnostics))
