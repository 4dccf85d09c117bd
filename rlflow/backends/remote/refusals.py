"""The backend server's log of refused frames, capped per time window so a stranger's flood costs it little."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

REFUSAL_LOG_WINDOW_S = 10.0
REFUSAL_LOG_LINES = 20  # refusals logged per window; the rest are counted in one line


class RefusalLog:
    """Logs refused frames one line each, at most ``REFUSAL_LOG_LINES`` per window: a stranger sending
    malformed frames in a loop costs the log a line a refusal only until the cap."""

    def __init__(
        self, log: logging.Logger, lines: int = REFUSAL_LOG_LINES, window_s: float = REFUSAL_LOG_WINDOW_S
    ) -> None:
        self.log, self.lines, self.window_s = log, lines, window_s
        self._lock = threading.Lock()
        self._window_start = time.monotonic()
        self._logged = self._suppressed = 0

    def warning(self, message: str, *args: Any) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._window_start >= self.window_s:
                if self._suppressed:
                    self.log.warning(
                        "%d more refusals in the last %.0f s were not logged", self._suppressed, self.window_s
                    )
                self._window_start, self._logged, self._suppressed = now, 0, 0
            if self._logged >= self.lines:
                self._suppressed += 1
                return
            self._logged += 1
        self.log.warning(message, *args)
