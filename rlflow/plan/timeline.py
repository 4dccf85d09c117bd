"""Where a run spent its time: a Gantt chart and a per-stage summary from RUN_DIR/trace.jsonl.

``trace.jsonl`` holds one JSON object per stage execution on one worker: ``step``, ``stage``,
``resource``, ``pid``, ``start``, ``end`` (wall-clock seconds). Step 0 is the init phase
(the first weight sync, validation before training). ``startup.jsonl`` (``phase``, ``start``,
``end``) holds what came before it: loading data, starting Ray, starting the pools.

Design notes: docs/design/timeline.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlflow.errors import RlflowError

TRACE_FILE = "trace.jsonl"
STARTUP_FILE = "startup.jsonl"
STARTUP_LANE = "start-up"
STARTUP_COLOURS = ("0.72", "0.84")  # greys, apart from the stages' colours
LIGHT = {"C1", "C6", "C7", "C8", "C9"}  # stage colours that take black text
MIN_BAR_PX = 2.5  # no stage is drawn narrower: a 50 ms stage in a 10-minute run still shows
LABEL_PX_PER_CHAR = 5.5
STEP_LABEL_PX = 45
BAR_HEIGHT = 0.56
REQUIRED = ("step", "stage", "resource", "pid", "start", "end")


class TraceError(RlflowError):
    """A trace file is missing or malformed (the message names the file and line)."""

    exit_code = 2


@dataclass(frozen=True)
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


def read_trace(path: Path) -> list[Span]:
    """Every span of a trace file; a bad line is an error naming the file, the line and the problem."""
    spans = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            spans.append(_span(path, number, line))
    if not spans:
        raise TraceError(f"{path}: the trace is empty (did the run reach its first stage?)")
    return spans


def _span(path: Path, number: int, line: str) -> Span:
    where = f"{path}:{number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not JSON ({exc.msg})") from None
    missing = [k for k in REQUIRED if not isinstance(row, dict) or k not in row]
    if missing:
        raise TraceError(f"{where}: missing {', '.join(missing)} (each line needs {', '.join(REQUIRED)})")
    try:
        span = Span(int(row["step"]), str(row["stage"]), str(row["resource"]), int(row["pid"]),
                    float(row["start"]), float(row["end"]))  # fmt: skip
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{where}: {exc}") from None
    if span.end < span.start:
        raise TraceError(f"{where}: stage {span.stage!r} ends ({span.end}) before it starts ({span.start})")
    return span


def _windows(spans: Iterable[Span], key) -> dict:
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
    return [window for step, window in _windows(spans, lambda s: s.step).items() if step >= 1]


def summarize(spans: list[Span]) -> list[StageTime]:
    """Per-stage totals: training stages by total time (largest first), then init stages."""
    step_time = _covered(_step_windows(spans))
    per_call = _windows(spans, lambda s: (s.step >= 1, s.stage, s.step))
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
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
                phases.append(Span(-1, str(row["phase"]), STARTUP_LANE, 0, float(row["start"]), float(row["end"])))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise TraceError(
                    f"{path}:{number}: not a start-up phase ({exc}); each line needs phase, start, end"
                ) from None
    return phases


def in_steps(spans: list[Span], steps: tuple[int, int] | None) -> list[Span]:
    """The spans of steps ``first``..``last`` (inclusive); start-up phases (step -1) come with step 0."""
    if steps is None:
        return spans
    first, last = steps
    chosen = [s for s in spans if first <= s.step <= last or (s.step < 0 and first <= 0)]
    if not any(s.step >= 0 for s in chosen):
        raise TraceError(f"the trace has no step in {first}-{last} (it holds steps 0-{max(s.step for s in spans)})")
    return chosen


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
    """Draw the Gantt chart to ``output`` (SVG or PNG by suffix): a start-up lane when phases are given,
    one lane per worker with its idle share, stages at a visible minimum width, names on long bars."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    if output.suffix.lower() not in (".svg", ".png"):
        raise TraceError(f"cannot draw {str(output)!r}: use a .svg or .png file name")
    shown = sorted(in_steps([*startup, *spans], steps), key=lambda s: s.start)
    origin = min(s.start for s in shown)
    span_s = max(max(s.end for s in shown) - origin, 1e-6) * 1.005
    lanes = list(dict.fromkeys((s.resource, s.pid) for s in sorted(shown, key=lambda s: (s.step >= 0, s.start))))
    lane_of = {lane: i for i, lane in enumerate(lanes)}
    colours = {stage: f"C{i % 10}" for i, stage in enumerate(dict.fromkeys(s.stage for s in shown if s.step >= 0))}
    idle = idle_shares(shown)
    overlapping = steps_in_flight(shown)[1] > 0
    use = resource_use(shown)
    if use:
        title = (
            (title or "stage timeline")
            + "\nidle share of training by resource: "
            + ", ".join(f"{r.resource} {100 * r.idle:.0f}%" for r in use)
        )

    fig = Figure(figsize=(13, 1.5 + 0.5 * len(lanes)), layout="constrained")
    ax = fig.add_subplot()
    ax.set_yticks(range(len(lanes)), [_lane_label(lane, idle) for lane in lanes], fontsize=8)
    ax.set_ylim(len(lanes) - 0.5, -0.5)  # the first lane on top
    ax.set_xlim(0, span_s)
    ax.set_xlabel("seconds since " + ("start-up began" if any(s.step < 0 for s in shown) else "the first stage"))
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title or "stage timeline", loc="left", pad=16)
    handles = [Patch(color=colour, label=stage) for stage, colour in colours.items()]
    if overlapping:
        handles.append(Patch(facecolor="0.6", edgecolor="white", hatch="//", label="even steps"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.draw_without_rendering()  # lay out first: bar widths and labels are sized in pixels
    px_per_s = ax.get_window_extent().width / span_s
    outside = 0  # start-up labels too long for their bar go above and below it, in turn
    for n, s in enumerate(shown):
        lane, startup_phase = lane_of[(s.resource, s.pid)], s.step < 0
        colour = STARTUP_COLOURS[n % 2] if startup_phase else colours[s.stage]
        width = max(s.end - s.start, MIN_BAR_PX / px_per_s)
        middle = s.start - origin + width / 2
        hatch = "//" if overlapping and s.step > 0 and s.step % 2 == 0 else None  # tell step t+1 from step t
        ax.barh(
            lane,
            width,
            left=s.start - origin,
            height=BAR_HEIGHT,
            color=colour,
            linewidth=0,
            hatch=hatch,
            edgecolor="white",
        )  # the hatch takes the edge colour; no edge is drawn (linewidth 0)
        name = f"{s.stage} {s.step}" if overlapping and s.step > 0 else s.stage
        if width * px_per_s > LABEL_PX_PER_CHAR * len(name) + 6:
            ax.text(middle, lane, name, ha="center", va="center", fontsize=7,
                    color="black" if startup_phase or colour in LIGHT else "white")  # fmt: skip
        elif startup_phase:
            below = outside % 2
            ax.text(middle, lane + (0.5 if below else -0.5) * BAR_HEIGHT, s.stage, ha="center",
                    va="top" if below else "bottom", fontsize=6.5, color="0.3")  # fmt: skip
            outside += 1
    _step_marks(ax, shown, origin, px_per_s)
    output.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, smaller
        fig.savefig(output, dpi=110)
    return output


def _step_marks(ax, spans: list[Span], origin: float, px_per_s: float) -> None:
    """A faint line where each step starts and its name over the middle of it, as often as names fit."""
    windows = sorted(_windows([s for s in spans if s.step >= 0], lambda s: s.step).items())
    last_label, named = float("-inf"), False
    for step, (lo, hi) in windows:
        ax.axvline(lo - origin, color="grey", linestyle=":", linewidth=0.7, alpha=0.7)
        middle = (lo + hi) / 2 - origin
        if (middle - last_label) * px_per_s >= STEP_LABEL_PX:
            label = "init" if step == 0 else str(step) if named else f"step {step}"
            named = named or step > 0
            ax.text(middle, 1.0, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=7,
                    color="grey")  # fmt: skip
            last_label = middle


def _lane_label(lane: tuple[str, int], idle: dict[tuple[str, int], float]) -> str:
    resource, pid = lane
    if resource == STARTUP_LANE:
        return "start-up (driver)"
    percent = 100 * idle.get(lane, 0.0)
    share = f"\nidle {percent:.{0 if percent < 99.5 else 1}f}% of training" if lane in idle else ""
    return f"{resource} (pid {pid}){share}"
