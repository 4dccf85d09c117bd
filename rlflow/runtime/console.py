"""What ``rlflow run`` says while it works: a header, a line per start-up phase, a line per step, a summary.

Quiet, normal or verbose; rich on a terminal, plain lines anywhere else. Design notes: docs/design/console.md.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console
from rich.text import Text

QUIET, NORMAL, VERBOSE = 0, 1, 2
ETA_WINDOW = 20
PREFIX = "[rlflow] "

# (metric, short name), in the order shown
STEP_METRICS = (
    ("critic/score/mean", "reward"),
    ("reward/acc", "acc"),
    ("response_length/mean", "len"),
    ("actor/kl_loss", "kl"),
    ("actor/entropy", "entropy"),
)
VERBOSE_METRICS = (("actor/pg_loss", "pg_loss"), ("actor/grad_norm", "grad_norm"), ("perf/throughput", "tok/s"))
SHOWN_UNLESS_SAME_AS = {"reward/acc": "critic/score/mean"}
VAL_CORE = re.compile(r"^val-core/(?P<source>.+)/(?P<var>[^/]+)/mean@(?P<n>\d+)$")
TIMING_PREFIX = "timing_s/"

PhaseRecorder = Callable[[str, float, float], None]  # (label, start, end) in wall-clock seconds


def fmt(value: Any) -> str:
    """Three significant digits for floats, integers as they are."""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def duration(seconds: float) -> str:
    """``4.2 s``, ``3m05s``, ``1h02m``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def compact_metrics(metrics: dict[str, Any], verbose: bool = False) -> list[tuple[str, str]]:
    """The (short name, value) pairs a step line shows, in order."""
    chosen = STEP_METRICS + (VERBOSE_METRICS if verbose else ())
    shown: dict[str, str] = {}
    pairs = []
    for key, label in chosen:
        if key not in metrics:
            continue
        text = fmt(metrics[key])
        twin = SHOWN_UNLESS_SAME_AS.get(key)
        if twin is not None and shown.get(twin) == text:
            continue
        shown[key] = text
        pairs.append((label, text))
    for key in sorted(metrics):
        match = VAL_CORE.match(key)
        if match:
            at = f"@{match['n']}" if match["n"] != "1" else ""
            pairs.append((f"val {match['source']}/{match['var']}{at}", fmt(metrics[key])))
    return pairs


def stage_timings(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """Per-stage seconds of a step (``timing_s/*`` but the step's own), in the order the stages ran."""
    return [
        (key.removeprefix(TIMING_PREFIX), f"{value:.2f}")
        for key, value in metrics.items()
        if key.startswith(TIMING_PREFIX) and key != "timing_s/step"
    ]


class StepClock:
    """Step end times -> seconds per step and the time left."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.recent: deque[float] = deque(maxlen=ETA_WINDOW)

    def tick(self) -> None:
        now = time.perf_counter()
        self.recent.append(now - self.last)
        self.last = now

    def per_step(self) -> float | None:
        return sum(self.recent) / len(self.recent) if self.recent else None

    def eta(self, steps_left: int) -> float | None:
        per_step = self.per_step()
        return None if per_step is None else per_step * steps_left


@dataclass
class Phase:
    """A phase under way; ``detail`` (set inside the ``with``) is shown next to its duration, and ``end``
    (wall clock, set inside the ``with`` when known) is when it ended if that was before the ``with`` did."""

    label: str
    detail: str = ""
    end: float | None = None


class RunConsole:
    """The run's narrator and its console sink (``log``/``close`` like every metrics sink)."""

    name = "console"

    def __init__(self, verbosity: int = NORMAL, stream: TextIO | None = None) -> None:
        self.verbosity = verbosity
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty()
        # a pipe gets plain text even under FORCE_COLOR: no escape codes, no redraws, no wrapping
        self.rich = Console(file=self.stream, force_terminal=self.live, highlight=False, soft_wrap=True)
        self.on_phase: PhaseRecorder | None = None
        self.total = 0
        self.clock = StepClock()
        self.latest: dict[str, Any] = {}  # each metric's latest value (validation runs every test_freq)
        self.started = time.perf_counter()
        self.progress: Any = None
        self.task: Any = None

    # ---- lines --------------------------------------------------------------------------
    def say(self, text: str | Text, style: str = "", level: int = NORMAL) -> None:
        """One line: styled on a terminal, ``[rlflow] text`` elsewhere."""
        if self.verbosity < level:
            return
        line = text if isinstance(text, Text) else Text(text, style=style)
        self.rich.print(line if self.live else Text(PREFIX + line.plain))

    def header(self, title: str, facts: list[tuple[str, str]]) -> None:
        """The run's title line, then one ``name  value`` line per fact."""
        self.say(title, "bold")
        width = max((len(name) for name, _ in facts), default=0)
        for name, value in facts:
            self.say(f"  {name.ljust(width)}  {value}")

    @contextmanager
    def phase(self, label: str, record: bool = True, since: float | None = None) -> Iterator[Phase]:
        """Time a phase: a spinner (terminal) while it runs, then a line with its duration; recorded
        through ``on_phase`` when ``record``. ``since``: the wall-clock moment the phase began, when
        that was before this ``with`` (it ran while something else was waited on)."""
        self._stop_progress()
        phase = Phase(label)
        wall = time.time()
        start = time.perf_counter() - (wall - since if since is not None else 0.0)
        wall = since if since is not None else wall
        if not self.live:
            self.say(f"{label} ...", level=VERBOSE)
        spinning = self.live and self.verbosity >= NORMAL
        try:
            with self.rich.status(f"{label} ...") if spinning else nullcontext():
                yield phase
        except BaseException:
            self.say(f"{'✗ ' if self.live else ''}{label}: failed after {duration(time.perf_counter() - start)}", "red")
            raise
        seconds = time.perf_counter() - start if phase.end is None else max(0.0, phase.end - wall)
        detail = f" ({phase.detail})" if phase.detail else ""
        self.say(f"{'✓ ' if self.live else ''}{label}: {duration(seconds)}{detail}", "green")
        if record and self.on_phase is not None:
            self.on_phase(label, wall, wall + seconds)

    def logging_handler(self) -> logging.Handler:
        """Where log records go: through this console on a terminal (they print above the spinner and the
        bar instead of tearing them), plain ``[rlflow] message`` lines on stderr otherwise."""
        if self.live:
            from rich.logging import RichHandler

            return RichHandler(console=self.rich, show_time=False, show_path=False, markup=False)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(PREFIX + "%(message)s"))
        return handler

    # ---- steps --------------------------------------------------------------------------
    def start_training(self, total: int, first: int) -> None:
        """Steps ``first``..``total`` are about to run: the ETA clock starts now (after start-up)."""
        self.total = total
        self.clock = StepClock()
        self._stop_progress()
        if self.live and self.verbosity >= NORMAL:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("[bold]step"),
                MofNCompleteColumn(),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[eta]}"),
                console=self.rich,
                transient=True,
            )
            self.task = self.progress.add_task("train", total=total, completed=first - 1, eta="eta -")
            self.progress.start()

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.latest.update(metrics)
        eta = None
        if step >= 1:
            self.clock.tick()
            eta = self.clock.eta(self.total - step)
        if self.verbosity < NORMAL:
            return
        self.say(self.step_line(step, metrics, eta))
        timings = stage_timings(metrics)
        if self.verbosity >= VERBOSE and timings:
            self.say("  stage seconds: " + "  ".join(f"{name} {value}" for name, value in timings), "dim")
        if self.progress is not None:
            self.progress.update(self.task, completed=step, eta=f"eta {duration(eta)}" if eta is not None else "eta -")

    def step_line(self, step: int, metrics: dict[str, Any], eta: float | None) -> Text:
        """``step 3/100  reward 0.383  len 17.8  kl 0.00361  entropy 0.187  5.5 s/step  eta 9m02s``."""
        pairs = compact_metrics(metrics, self.verbosity >= VERBOSE)
        if "timing_s/step" in metrics:
            pairs.append(("", f"{metrics['timing_s/step']:.1f} s/step"))
        if eta is not None and not self.live:  # on a terminal the bar shows it
            pairs.append(("eta", duration(eta)))
        line = Text(f"step {step}/{self.total}" if self.total else f"step {step}", style="bold")
        for name, value in pairs:
            line.append("  ")
            if name:
                line.append(name + " ", style="dim")
            line.append(value)
        return line

    def close(self) -> None:
        self._stop_progress()

    def _stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    # ---- the end ------------------------------------------------------------------------
    def summary(self, last_step: int, run_dir: Any) -> None:
        """Always shown, quiet included: where the run is and the latest value of each headline metric."""
        elapsed = duration(time.perf_counter() - self.started)
        self.say(f"run finished at step {last_step} in {elapsed}", "bold", level=QUIET)
        shown = compact_metrics(self.latest)
        if shown:
            self.say("  last: " + "  ".join(f"{name} {value}" for name, value in shown), level=QUIET)
        self.say(f"  run directory: {run_dir}", level=QUIET)
