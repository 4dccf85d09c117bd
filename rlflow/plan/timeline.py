"""Where a run spent its time: a Gantt chart and a per-stage summary from RUN_DIR/trace.jsonl.

``trace.jsonl`` holds one JSON object per stage execution on one worker: ``step``, ``stage``,
``resource``, ``pid``, ``start``, ``end`` (wall-clock seconds). Step 0 is the init phase
(the first weight sync, validation before training).

Choices:
- A stage's time in a step is its wall span over all workers (first start to last end), not
  the sum over workers: sharded stages run in parallel.
- A stage's share is its span over the summed wall time of the training steps (step >= 1);
  init entries are reported on their own rows with no share.
- The chart has one row per worker (resource + pid), bars coloured by stage, a dotted line at
  each step's start; SVG keeps its text as text. matplotlib is imported inside
  ``render_timeline`` and draws on a bare ``Figure`` (no pyplot state, no display needed),
  so importing this module stays cheap.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rlflow.errors import RlflowError

TRACE_FILE = "trace.jsonl"
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


def summarize(spans: list[Span]) -> list[StageTime]:
    """Per-stage totals: training stages by total time (largest first), then init stages."""
    step_time = sum(hi - lo for step, (lo, hi) in _windows(spans, lambda s: s.step).items() if step >= 1)
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


def render_timeline(spans: list[Span], output: Path, title: str = "") -> Path:
    """Draw the Gantt chart to ``output`` (SVG or PNG by suffix)."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    if output.suffix.lower() not in (".svg", ".png"):
        raise TraceError(f"cannot draw {str(output)!r}: use a .svg or .png file name")
    origin = min(s.start for s in spans)
    workers = sorted({(s.resource, s.pid) for s in spans})
    row_of = {w: i for i, w in enumerate(workers)}
    stages = list(dict.fromkeys(s.stage for s in sorted(spans, key=lambda s: s.start)))
    colours = {stage: f"C{i % 10}" for i, stage in enumerate(stages)}
    fig = Figure(figsize=(12, 1.2 + 0.45 * len(workers)))
    ax = fig.add_subplot()
    for s in spans:
        ax.barh(row_of[(s.resource, s.pid)], s.end - s.start, left=s.start - origin, height=0.6,
                color=colours[s.stage], edgecolor="black", linewidth=0.3)  # fmt: skip
    for step, (lo, _) in sorted(_windows(spans, lambda s: s.step).items()):
        ax.axvline(lo - origin, color="grey", linestyle=":", linewidth=0.8)
        label = "init" if step == 0 else f"step {step}"
        ax.text(lo - origin, 1.0, f" {label}", transform=ax.get_xaxis_transform(), va="bottom", fontsize=7,
                color="grey")  # fmt: skip
    ax.set_yticks(range(len(workers)), [f"{r} (pid {p})" for r, p in workers])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first stage started")
    ax.set_title(title or "stage timeline", pad=14)
    handles = [Patch(color=colours[st], label=st) for st in stages]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, smaller
        fig.savefig(output)
    return output
