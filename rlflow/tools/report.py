"""What a run says about failing tools: the first failure of each kind as a warning, every failure in the tool log.

Design notes: docs/design/tools.md.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

from rlflow.sandbox.process import OUTPUT_CAP_BYTES
from rlflow.sandbox.protocol import one_line

log = logging.getLogger(__name__)

HIGH_ERROR_RATIO = 0.5
HIGH_ROLLOUTS = 3
_RATIO = re.compile(r"^tool/(.+)/error_ratio$")
_SHOWN = 300  # characters of a failure's detail on the console (the log keeps more)


def _line(text: str, limit: int) -> str:
    text = one_line(text)  # a detail may quote model text: one line, no terminal escapes
    return text if len(text) <= limit else text[:limit] + "..."


class ToolReport:
    """The failures of one tool process's tools (see the module docstring)."""

    def __init__(self, log_path: str | Path | None) -> None:
        self.log_path = Path(log_path) if log_path else None
        self.warned: set[tuple[str, str]] = set()
        self.high: dict[str, int] = {}  # tool -> rollouts in a row at a high error ratio

    def failed(self, tool: str, kind: str, detail: str) -> None:
        """One failed call of ``tool``: a line in the log; a warning when it is the first of its kind."""
        self._append(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} tool {tool!r} {kind}: {_line(detail, 2000)}\n")
        if (tool, kind) in self.warned:
            return
        self.warned.add((tool, kind))
        rest = f"every failed call: {self.log_path}" if self.log_path else "logged once per tool and kind of failure"
        log.warning(
            "tool %r: %s: %s; the model reads it as the tool's answer (%s)", tool, kind, _line(detail, _SHOWN), rest
        )

    def rollout_done(self, metrics: dict[str, float]) -> None:
        """Warn about each tool whose ``tool/<name>/error_ratio`` has been high for ``HIGH_ROLLOUTS`` rollouts."""
        for key, ratio in metrics.items():
            match = _RATIO.match(key)
            if match is None:
                continue
            tool = match.group(1)
            self.high[tool] = self.high.get(tool, 0) + 1 if ratio >= HIGH_ERROR_RATIO else 0
            if self.high[tool] == HIGH_ROLLOUTS:
                log.warning(
                    "tool %r failed on %.0f%% of its calls in the last rollout and on at least %.0f%% in each of "
                    "the %d before it; the model learns little from its answers (see %s)",
                    tool,
                    100 * ratio,
                    100 * HIGH_ERROR_RATIO,
                    HIGH_ROLLOUTS - 1,
                    self.log_path or "the warnings above",
                )

    def _append(self, text: str) -> None:
        if self.log_path is None:
            return
        try:
            if self.log_path.exists() and self.log_path.stat().st_size >= OUTPUT_CAP_BYTES:
                return  # the tool process's own output stops at the same cap
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, text.encode(errors="replace"))
            finally:
                os.close(fd)
        except OSError:  # a run directory swept away: the warnings still go out
            pass
