"""``StepRecord``: one training step as it runs: its number and epoch, its clock, its stages' seconds,
and the validation metrics it produced. The mode creates it; the stage runner fills it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rlflow.runtime.sinks import StepTimer


@dataclass
class StepRecord:
    step: int
    epoch: int = 0
    started: float = field(default_factory=time.perf_counter)
    timer: StepTimer = field(default_factory=StepTimer)
    validation: dict[str, Any] = field(default_factory=dict)
    stopped: float | None = None  # where timing_s/step ends: validation's start (verl's steps 1-10 only)

    def time(self, name: str):
        """A block timed into ``timing_s/<name>``."""
        return self.timer.time(name)

    def add(self, name: str, seconds: float) -> None:
        """Seconds a stage ran on its own (measured where it ran, not by a block here)."""
        self.timer.timing[name] = self.timer.timing.get(name, 0.0) + seconds

    def stop_clock(self) -> None:
        self.stopped = time.perf_counter()

    def timing(self) -> dict[str, float]:
        """``timing_s/*`` of the step so far, ``step`` included."""
        return {**self.timer.timing, "step": (self.stopped or time.perf_counter()) - self.started}
