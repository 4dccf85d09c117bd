"""What the model reads of a tool's answer: cut as verl cuts it, and a failure worded without host paths.

Design notes: docs/design/tools.md.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import traceback
from pathlib import Path

from rlflow.sandbox.protocol import short

# an absolute path of two parts or more, not inside a word or a relative path
_ABSOLUTE = re.compile(r"(?<![\w.~/-])/(?:[^\s'\"/:,;()\[\]{}<>]+/)+[^\s'\"/:,;()\[\]{}<>]*")


def truncate(text: str, limit: int, side: str) -> str:
    """verl's cut of a tool answer longer than ``limit`` characters (``ToolAgentLoop._call_tool``)."""
    if len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


def _real(path: str) -> str:
    return os.path.realpath(path).rstrip(os.sep) or os.sep


class Where:
    """Places and paths as a tool's error observation shows them (see the module docstring)."""

    def __init__(self, root: str, user_paths: list[str], scratch: str) -> None:
        self.root = _real(root)
        self.user_paths = [_real(p) for p in user_paths]
        self.scratch = _real(scratch)
        self.user_files: set[str] = set()  # the tools' own modules, wherever they are installed
        ours = str(Path(__file__).resolve().parents[1])  # rlflow's own frames (the tool process, the guard)
        self.not_user = {_real(p) for p in (sys.prefix, sys.base_prefix, sysconfig.get_paths()["stdlib"], ours)}
        entries = [_real(p) for p in sys.path if p and os.path.isabs(p)]
        # longest first: a file shows relative to the innermost folder that holds it
        self.bases = sorted({self.root, *self.user_paths, *entries}, key=len, reverse=True)

    def add_file(self, path: str | None) -> None:
        if path:
            self.user_files.add(_real(path))

    def _is_user(self, filename: str) -> bool:
        real = _real(filename)
        if real in self.user_files:
            return True
        if any(_under(real, p) for p in self.not_user):
            return False
        return any(_under(real, p) for p in self.user_paths)

    def show(self, path: str) -> str:
        """``path`` relative to the scratch folder, the project or its Python-path entry; else its last part."""
        real = _real(path)
        if _under(real, self.scratch):
            return os.path.relpath(real, self.scratch)
        for base in self.bases:
            if _under(real, base) and real != base:
                return os.path.relpath(real, base)
        return os.path.basename(real) or real

    def clean(self, text: str) -> str:
        """``text`` with every absolute path in it shown as ``show`` shows it."""
        return _ABSOLUTE.sub(lambda m: self.show(m.group(0)), text)

    def failure(self, exc: BaseException) -> str:
        """``file:line in function: message`` at the innermost frame of the user's code (else the innermost)."""
        frames = traceback.extract_tb(exc.__traceback__)
        mine = [f for f in frames if self._is_user(f.filename)] or frames
        where = f"{self.show(mine[-1].filename)}:{mine[-1].lineno} in {mine[-1].name}" if mine else "(no traceback)"
        return f"{where}: {self.clean(short(exc))}"


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
