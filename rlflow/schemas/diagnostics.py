"""Diagnostics: one problem in a file the user wrote, positioned at a line and column.

The text form is ``file:line:col: dotted.path: problem (fix)``. Design notes: docs/design/schemas.md.
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
