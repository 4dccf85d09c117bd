"""Where a run spent its time: a Gantt chart and a per-stage summary from RUN_DIR/trace.jsonl.

Read a line at a time, at most ``MAX_SPANS`` spans held; the chart is ``rlflow.plan.timeline_chart``'s.
Design notes: docs/design/timeline.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlflow.errors import RlflowError
from rlflow.io import read_json_lines

TRACE_FILE = "trace.jsonl"
STARTUP_FILE = "startup.jsonl"
STARTUP_LANE = "start-up"
REQUIRED = ("step", "stage", "resource", "pid", "start", "end")
MAX_LINE_BYTES = 64 << 10  # one stage call: about 150 bytes
MAX_SPANS = 500_000  # held at once (about 100 MB); a run of 40 calls a step reaches it after 12,500 steps


class TraceError(RlflowError):
    """A trace file is missing or malformed (the message names the file and line)."""

    exit_code = 2


@dataclass(frozen=True, slots=True)  # slots: half a million of them fit in about 100 MB
class Span:
    step: int
    stage: str
    resource: str
    pid: int
    start: float
    end: float


@dataclass(frozen=True)
class StageTime:
    stage: str
    init: bool
    calls: int
    total_s: float
    mean_s: float
    share: float | None  # of the training steps' wall time; None for init rows


def trace_path(run_dir: Path) -> Path:
    path = run_dir / TRACE_FILE if run_dir.is_dir() else run_dir
    if not path.is_file():
        raise TraceError(
            f"no trace at {str(path)!r}: pass a run directory holding {TRACE_FILE} (written by `rlflow run`)"
        )
    return path


def read_trace(path: Path, steps: tuple[int, int] | None = None) -> list[Span]:
    """Every span of a trace file (of ``steps`` only, when given); a bad line is an error naming the file, the
    line and the problem, and more than ``MAX_SPANS`` spans one naming the size and ``--steps``."""
    spans: list[Span] = []
    names: dict[str, str] = {}  # one copy of each stage and resource name, however many spans hold it
    last_step = -1
    for number, row in _rows(path):
        span = _span(path, number, row, names)
        last_step = max(last_step, span.step)
        if steps is None or _in_range(span.step, steps):
            if len(spans) == MAX_SPANS:
                _too_many(path, number, last_step, steps)
            spans.append(span)
    if not spans and steps is None:
        raise TraceError(f"{path}: the trace is empty (did the run reach its first stage?)")
    if not spans:
        raise TraceError(f"the trace has no step in {steps[0]}-{steps[1]} (it holds steps 0-{last_step})")
    return spans


def _too_many(path: Path, number: int, last_step: int, steps: tuple[int, int] | None) -> None:
    size = path.stat().st_size / 1e6
    chosen = f" of steps {steps[0]}-{steps[1]}" if steps else ""
    raise TraceError(
        f"{path}: more than {MAX_SPANS:,} stage calls{chosen} ({size:,.0f} MB; step {last_step} by line "
        f"{number:,}), the most a timeline holds; choose fewer steps with --steps FIRST-LAST"
    )


def _rows(path: Path) -> Iterator[tuple[int, object]]:
    return read_json_lines(path, MAX_LINE_BYTES, TraceError)


def _span(path: Path, number: int, row: object, names: dict[str, str]) -> Span:
    where = f"{path}:{number}"
    missing = [k for k in REQUIRED if not isinstance(row, dict) or k not in row]
    if missing:
        raise TraceError(f"{where}: missing {', '.join(missing)} (each line needs {', '.join(REQUIRED)})")
    try:
        stage, resource = str(row["stage"]), str(row["resource"])
        span = Span(int(row["step"]), names.setdefault(stage, stage), names.setdefault(resource, resource),
                    int(row["pid"]), float(row["start"]), float(row["end"]))  # fmt: skip
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceError(f"{where}: {exc}") from None
    if span.end < span.start:
        raise TraceError(f"{where}: stage {span.stage!r} ends ({span.end}) before it starts ({span.start})")
    return span


def windows_by(spans: Iterable[Span], key) -> dict:
    """key(span) -> (first start, last end)."""
    out: dict = {}
    for s in spans:
        k = key(s)
        lo, hi = out.get(k, (s.start, s.end))
        out[k] = (min(lo, s.start), max(hi, s.end))
    return out


@dataclass(frozen=True)
class ResourceUse:
    resource: str
    workers: int
    busy_s: float  # the union of its workers' calls in the training steps
    wall_s: float  # the training steps' wall time: first start to last end

    @property
    def idle(self) -> float:
        return 1.0 - self.busy_s / self.wall_s if self.wall_s > 0 else 0.0


def _step_windows(spans: Iterable[Span]) -> list[tuple[float, float]]:
    return [window for step, window in windows_by(spans, lambda s: s.step).items() if step >= 1]


def summarize(spans: list[Span]) -> list[StageTime]:
    """Per-stage totals: training stages by total time (largest first), then init stages."""
    step_time = _covered(_step_windows(spans))
    per_call = windows_by(spans, lambda s: (s.step >= 1, s.stage, s.step))
    totals: dict[tuple[bool, str], list[float]] = {}
    for (training, stage, _), (lo, hi) in per_call.items():
        totals.setdefault((training, stage), []).append(hi - lo)
    rows = [
        StageTime(
            stage,
            not training,
            len(times),
            sum(times),
            sum(times) / len(times),
            sum(times) / step_time if training and step_time > 0 else None,
        )  # fmt: skip
        for (training, stage), times in totals.items()
    ]
    return sorted(rows, key=lambda r: (r.init, -r.total_s, r.stage))


def render_summary(rows: list[StageTime]) -> str:
    """The summary as an aligned text table."""
    table = [["stage", "calls", "total_s", "mean_s", "share"]]
    for r in rows:
        share = f"{100 * r.share:.1f}%" if r.share is not None else "-"
        name = f"{r.stage} (init)" if r.init else r.stage
        table.append([name, str(r.calls), f"{r.total_s:.3f}", f"{r.mean_s:.3f}", share])
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    lines = [
        "  ".join(cell.ljust(widths[0]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(row)).rstrip()
        for row in table
    ]
    return "\n".join(lines) + "\n"


def resource_use(spans: list[Span]) -> list[ResourceUse]:
    """Per resource, in order of first use: workers, busy time and the training steps' wall time (first start
    to last end, as the lanes' idle shares count it: time between steps is time a resource idles)."""
    training = [s for s in spans if s.step >= 1]
    wall = max((s.end for s in training), default=0.0) - min((s.start for s in training), default=0.0)
    by_resource: dict[str, list[Span]] = {}
    for s in sorted(spans, key=lambda s: s.start):
        if s.step >= 1:
            by_resource.setdefault(s.resource, []).append(s)
    return [
        ResourceUse(name, len({s.pid for s in calls}), _covered([(s.start, s.end) for s in calls]), wall)
        for name, calls in by_resource.items()
    ]


def steps_in_flight(spans: list[Span]) -> tuple[float, int]:
    """(seconds two or more training steps were in flight together, steps that started before an earlier
    one ended): zero for a sync run, whose steps follow each other."""
    windows = sorted(_step_windows(spans))
    events = sorted([(lo, 1) for lo, _ in windows] + [(hi, -1) for _, hi in windows])
    together, running, since = 0.0, 0, 0.0
    for at, change in events:  # a sweep over starts and ends: time while two or more windows are open
        if running >= 2:
            together += at - since
        running, since = running + change, at
    latest_end = float("-inf")
    early = 0
    for start, end in windows:
        early += start < latest_end
        latest_end = max(latest_end, end)
    return together, early


def render_resources(spans: list[Span]) -> str:
    """Per resource busy and idle shares of the training steps' wall time, and the steps' overlap."""
    rows = resource_use(spans)
    if not rows:
        return ""
    table = [["resource", "workers", "busy_s", "busy", "idle"]]
    for r in rows:
        busy = 1.0 - r.idle
        table.append([r.resource, str(r.workers), f"{r.busy_s:.3f}", f"{100 * busy:.1f}%", f"{100 * r.idle:.1f}%"])
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    lines = [
        "  ".join(cell.ljust(widths[0]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(row)).rstrip()
        for row in table
    ]
    together, early = steps_in_flight(spans)
    steps = len(_step_windows(spans))
    lines.append(
        f"steps in flight together: {together:.3f} s of {rows[0].wall_s:.3f} s wall "
        f"({early} of {steps} steps started before an earlier one ended)"
    )
    return "\n".join(lines) + "\n"


def read_startup(run_dir: Path) -> list[Span]:
    """The run's start-up phases (``startup.jsonl``, written by ``rlflow run``) as spans of a ``start-up``
    lane; none for a run recorded before the file existed or when given a trace file."""
    path = run_dir / STARTUP_FILE
    if not run_dir.is_dir() or not path.is_file():
        return []
    phases = []
    for number, row in _rows(path):
        if len(phases) == MAX_SPANS:
            raise TraceError(f"{path}: more than {MAX_SPANS:,} start-up phases (a run writes about ten)")
        try:
            phases.append(Span(-1, str(row["phase"]), STARTUP_LANE, 0, float(row["start"]), float(row["end"])))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise TraceError(
                f"{path}:{number}: not a start-up phase ({exc}); each line needs phase, start, end"
            ) from None
    return phases


def in_steps(spans: list[Span], steps: tuple[int, int] | None) -> list[Span]:
    """The spans of steps ``first``..``last`` (inclusive); start-up phases (step -1) come with step 0."""
    if steps is None:
        return spans
    first, last = steps
    chosen = [s for s in spans if _in_range(s.step, steps)]
    if not any(s.step >= 0 for s in chosen):
        raise TraceError(f"the trace has no step in {first}-{last} (it holds steps 0-{max(s.step for s in spans)})")
    return chosen


def _in_range(step: int, steps: tuple[int, int]) -> bool:
    first, last = steps
    return first <= step <= last or (step < 0 and first <= 0)


def idle_shares(spans: list[Span]) -> dict[tuple[str, int], float]:
    """Per worker, the share of the training steps' wall time (first step start to last end) it ran nothing."""
    training = [s for s in spans if s.step >= 1]
    if not training:
        return {}
    lo, hi = min(s.start for s in training), max(s.end for s in training)
    busy: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for s in training:
        busy.setdefault((s.resource, s.pid), []).append((s.start, s.end))
    return {worker: 1.0 - _covered(intervals) / (hi - lo) for worker, intervals in busy.items()} if hi > lo else {}


def _covered(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals (a worker's calls may overlap: async stages, several dispatches)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def render_timeline(
    spans: list[Span],
    output: Path,
    title: str = "",
    startup: Sequence[Span] = (),
    steps: tuple[int, int] | None = None,
) -> Path:
    """Draw the Gantt chart to ``output`` (SVG or PNG by suffix): ``rlflow.plan.timeline_chart``, imported
    here so that reading a trace imports nothing of matplotlib's."""
    from rlflow.plan.timeline_chart import draw_timeline

    return draw_timeline(spans, output, title, startup, steps)
