"""The timeline as a Gantt chart (SVG or PNG): a start-up lane, one lane per worker, bars coloured by stage.

Bounded whatever the run, drawn in memory and written whole. Design notes: docs/design/timeline.md.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rlflow.errors import CannotWrite
from rlflow.io import why_unwritable, write_output
from rlflow.plan.timeline import (
    STARTUP_LANE,
    Span,
    TraceError,
    idle_shares,
    in_steps,
    resource_use,
    steps_in_flight,
    windows_by,
)

STARTUP_COLOURS = ("0.72", "0.84")  # greys, apart from the stages' colours
LIGHT = {"C1", "C6", "C7", "C8", "C9"}  # stage colours that take black text
MIN_BAR_PX = 2.5  # no stage is drawn narrower: a 50 ms stage in a 10-minute run still shows
LABEL_PX_PER_CHAR = 5.5
STEP_LABEL_PX = 45
BAR_HEIGHT = 0.56
MAX_BARS = 5_000  # drawn one by one; past it, each lane's spans are merged at the chart's resolution
MAX_LANES = 100  # one per worker; past it, one per resource
MAX_LEGEND = 20  # stages named in the legend
MAX_PER_BUCKET = 6  # bars in a few pixels of a lane, when spans are merged
OTHER_STAGES = "other stages"


def draw_timeline(
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
    shown, workers = _one_lane_per_resource(shown) if _lane_count(shown) > MAX_LANES else (shown, {})
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
    ax.set_yticks(range(len(lanes)), [_lane_label(lane, idle, workers) for lane in lanes], fontsize=8)
    ax.set_ylim(len(lanes) - 0.5, -0.5)  # the first lane on top
    ax.set_xlim(0, span_s)
    ax.set_xlabel("seconds since " + ("start-up began" if any(s.step < 0 for s in shown) else "the first stage"))
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title or "stage timeline", loc="left", pad=16)
    handles = [Patch(color=colour, label=stage) for stage, colour in list(colours.items())[:MAX_LEGEND]]
    if len(colours) > MAX_LEGEND:
        handles.append(Patch(color="white", label=f"... {len(colours) - MAX_LEGEND} more stages"))
    if overlapping:
        handles.append(Patch(facecolor="0.6", edgecolor="white", hatch="//", label="even steps"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.draw_without_rendering()  # lay out first: bar widths and labels are sized in pixels
    px_per_s = ax.get_window_extent().width / span_s
    merged = len(shown) > MAX_BARS
    if merged:  # each bar then stands for its stage's time in a few pixels: no minimum width, or all would be busy
        shown = coalesce(shown, MIN_BAR_PX / px_per_s)
    colours[OTHER_STAGES] = "0.5"
    _bars(ax, shown, lane_of, colours, (origin, px_per_s, 0.0 if merged else MIN_BAR_PX), overlapping)
    _step_marks(ax, shown, origin, px_per_s)
    picture = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, smaller
        fig.savefig(picture, format=output.suffix.lower()[1:], dpi=110)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_output(output, picture.getvalue())
    except OSError as exc:
        raise CannotWrite(why_unwritable(output, exc) + "; give -o a path you can write") from None
    return output


def _bars(ax, shown: list[Span], lane_of: dict, colours: dict, scale: tuple[float, float, float], overlapping: bool):
    """The spans as bars, one collection per lane, colour and hatch (a bar each would cost matplotlib tens of
    kB), with each stage's name on bars long enough to hold it. ``scale``: the chart's origin, pixels per
    second and the narrowest bar drawn, in pixels."""
    origin, px_per_s, min_px = scale
    groups: dict[tuple[int, str, str | None], list[tuple[float, float]]] = {}
    outside = 0  # start-up labels too long for their bar go above and below it, in turn
    for n, s in enumerate(shown):
        lane, startup_phase = lane_of[(s.resource, s.pid)], s.step < 0
        colour = STARTUP_COLOURS[n % 2] if startup_phase else colours[s.stage]
        width = max(s.end - s.start, min_px / px_per_s)
        middle = s.start - origin + width / 2
        hatch = "//" if overlapping and s.step > 0 and s.step % 2 == 0 else None  # tell step t+1 from step t
        groups.setdefault((lane, colour, hatch), []).append((s.start - origin, width))
        name = f"{s.stage} {s.step}" if overlapping and s.step > 0 else s.stage
        if width * px_per_s > LABEL_PX_PER_CHAR * len(name) + 6:
            ax.text(middle, lane, name, ha="center", va="center", fontsize=7,
                    color="black" if startup_phase or colour in LIGHT else "white")  # fmt: skip
        elif startup_phase:
            below = outside % 2
            ax.text(middle, lane + (0.5 if below else -0.5) * BAR_HEIGHT, s.stage, ha="center",
                    va="top" if below else "bottom", fontsize=6.5, color="0.3")  # fmt: skip
            outside += 1
    for (lane, colour, hatch), ranges in groups.items():
        # the hatch takes the edge colour; no edge is drawn (linewidth 0)
        ax.broken_barh(ranges, (lane - BAR_HEIGHT / 2, BAR_HEIGHT), facecolors=colour, linewidth=0, hatch=hatch,
                       edgecolor="white")  # fmt: skip


def coalesce(spans: list[Span], bucket_s: float) -> list[Span]:
    """Each lane's spans (sorted by start) merged where the chart cannot tell them apart: the spans that start
    within ``bucket_s`` (the narrowest bar drawn) of a bucket's first are that bucket, drawn as one bar per
    stage side by side from its start, each as long as that stage's calls in it took together, so the lane's
    busy share and each stage's part of it still show; at most ``MAX_PER_BUCKET`` bars, the smallest stages
    together under ``OTHER_STAGES``. A lane then holds a bounded number of bars, however long the run."""
    out: list[Span] = []
    open_bucket: dict[tuple[str, int], _Bucket] = {}
    for s in spans:
        lane = (s.resource, s.pid)
        bucket = open_bucket.get(lane)
        if bucket is None or s.start >= bucket.first.start + bucket_s:
            if bucket is not None:
                out.extend(bucket.bars())
            bucket = open_bucket[lane] = _Bucket(s)
        bucket.add(s)
    for bucket in open_bucket.values():
        out.extend(bucket.bars())
    return sorted(out, key=lambda s: s.start)


class _Bucket:
    """The spans of one lane that a chart draws in the same few pixels: each stage's time in them."""

    def __init__(self, first: Span) -> None:
        self.first = first
        self.seconds: dict[str, float] = {}  # in order of first appearance

    def add(self, s: Span) -> None:
        self.seconds[s.stage] = self.seconds.get(s.stage, 0.0) + (s.end - s.start)

    def bars(self) -> list[Span]:
        parts = list(self.seconds.items())
        if len(parts) > MAX_PER_BUCKET:
            ranked = sorted(parts, key=lambda part: -part[1])
            kept = {stage for stage, _ in ranked[: MAX_PER_BUCKET - 1]}
            rest = sum(seconds for stage, seconds in parts if stage not in kept)
            parts = [part for part in parts if part[0] in kept] + [(OTHER_STAGES, rest)]
        bars, at = [], self.first.start
        for stage, seconds in parts:
            bars.append(replace(self.first, stage=stage, start=at, end=at + seconds))
            at += seconds
        return bars


def _lane_count(spans: list[Span]) -> int:
    return len({(s.resource, s.pid) for s in spans})


def _one_lane_per_resource(spans: list[Span]) -> tuple[list[Span], dict[str, int]]:
    """Too many workers for a lane each: every resource's workers share one lane (pid -1), and the number of
    workers each lane stands for; more resources than lanes is an error."""
    workers: dict[str, set[int]] = {}
    for s in spans:
        workers.setdefault(s.resource, set()).add(s.pid)
    if len(workers) > MAX_LANES:
        raise TraceError(
            f"cannot draw {len(workers):,} resources, more than the {MAX_LANES} lanes a chart holds "
            "(is this a trace written by `rlflow run`?)"
        )
    merged = [s if s.resource == STARTUP_LANE else replace(s, pid=-1) for s in spans]
    return merged, {resource: len(pids) for resource, pids in workers.items()}


def _step_marks(ax, spans: list[Span], origin: float, px_per_s: float) -> None:
    """A faint line where each step starts (one collection, however many steps) and its name over the middle
    of it, as often as names fit."""
    windows = sorted(windows_by([s for s in spans if s.step >= 0], lambda s: s.step).items())
    lines: list[float] = []
    for _, (lo, _) in windows:  # steps closer than a few pixels would draw a grey smear: one line for them
        if not lines or (lo - origin - lines[-1]) * px_per_s >= 2 * MIN_BAR_PX:
            lines.append(lo - origin)
    ax.vlines(lines, 0, 1, transform=ax.get_xaxis_transform(), colors="grey", linestyles=":", linewidth=0.7,
              alpha=0.7)  # fmt: skip
    last_label, named = float("-inf"), False
    for step, (lo, hi) in windows:
        middle = (lo + hi) / 2 - origin
        if (middle - last_label) * px_per_s >= STEP_LABEL_PX:
            label = "init" if step == 0 else str(step) if named else f"step {step}"
            named = named or step > 0
            ax.text(middle, 1.0, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=7,
                    color="grey")  # fmt: skip
            last_label = middle


def _lane_label(lane: tuple[str, int], idle: dict[tuple[str, int], float], workers: dict[str, int]) -> str:
    resource, pid = lane
    if resource == STARTUP_LANE:
        return "start-up (driver)"
    percent = 100 * idle.get(lane, 0.0)
    share = f"\nidle {percent:.{0 if percent < 99.5 else 1}f}% of training" if lane in idle else ""
    who = f"{workers[resource]} workers" if resource in workers else f"pid {pid}"  # a lane for all of them
    return f"{resource} ({who}){share}"
