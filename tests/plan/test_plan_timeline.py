"""The timeline: trace.jsonl -> per-stage summary and a Gantt chart (SVG/PNG)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from rlflow.plan.timeline import TraceError, read_trace, render_summary, render_timeline, summarize, trace_path

T0 = 1_700_000_000.0


def record(step, stage, resource, pid, start, end):
    return {"step": step, "stage": stage, "resource": resource, "pid": pid, "start": T0 + start, "end": T0 + end}


# Init sync, then two steps: generate sharded over two workers (spans 0-4 and 10-13), reward on
# one CPU worker, update on both. Step 1 spans 1..9 (8 s), step 2 spans 10..16 (6 s): 14 s in all.
TRACE = [
    record(0, "sync_weights", "actor", 11, 0.0, 0.5),
    record(1, "generate", "actor", 11, 1.0, 4.0),
    record(1, "generate", "actor", 12, 1.0, 5.0),
    record(1, "reward", "scorers", 21, 5.0, 6.0),
    record(1, "update_actor", "actor", 11, 6.0, 9.0),
    record(1, "update_actor", "actor", 12, 6.0, 8.0),
    record(2, "generate", "actor", 11, 10.0, 13.0),
    record(2, "generate", "actor", 12, 10.0, 12.0),
    record(2, "reward", "scorers", 21, 13.0, 14.0),
    record(2, "update_actor", "actor", 11, 14.0, 16.0),
]


@pytest.fixture
def run_dir(tmp_path):
    lines = [json.dumps(r) for r in TRACE]
    lines.insert(3, "")  # blank lines are tolerated
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_summary_uses_wall_spans_over_workers(run_dir):
    rows = {(r.stage, r.init): r for r in summarize(read_trace(trace_path(run_dir)))}
    generate = rows[("generate", False)]
    assert (generate.calls, generate.total_s, generate.mean_s) == (2, 7.0, 3.5)
    assert generate.share == pytest.approx(7.0 / 14.0)
    assert rows[("update_actor", False)].total_s == pytest.approx(5.0)
    assert rows[("reward", False)].share == pytest.approx(2.0 / 14.0)
    init = rows[("sync_weights", True)]
    assert (init.calls, init.total_s, init.share) == (1, 0.5, None)


def test_summary_table_is_sorted_and_readable(run_dir):
    table = render_summary(summarize(read_trace(trace_path(run_dir)))).splitlines()
    assert table[0].split() == ["stage", "calls", "total_s", "mean_s", "share"]
    assert [line.split()[0] for line in table[1:]] == ["generate", "update_actor", "reward", "sync_weights"]
    assert table[1].split()[1:] == ["2", "7.000", "3.500", "50.0%"]
    assert table[-1].split() == ["sync_weights", "(init)", "1", "0.500", "0.500", "-"]


def test_svg_timeline_has_a_row_per_worker_and_every_stage(run_dir, tmp_path):
    out = render_timeline(read_trace(trace_path(run_dir)), tmp_path / "charts" / "timeline.svg", title="demo run")
    texts = "".join(ET.parse(out).getroot().itertext())
    for label in ("actor (pid 11)", "actor (pid 12)", "scorers (pid 21)", "generate", "reward", "update_actor",
                  "sync_weights", "step 1", "step 2", "init", "demo run"):  # fmt: skip
        assert label in texts, label


def test_png_timeline(run_dir, tmp_path):
    out = render_timeline(read_trace(trace_path(run_dir)), tmp_path / "timeline.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "trace.jsonl:2: not JSON"),
        ('{"step": 1, "stage": "x"}', "trace.jsonl:2: missing resource, pid, start, end"),
        ('{"step": "one", "stage": "x", "resource": "r", "pid": 1, "start": 0, "end": 1}', "trace.jsonl:2: invalid"),
        ('{"step": 1, "stage": "x", "resource": "r", "pid": 1, "start": 5, "end": 1}', "ends (1.0) before it starts"),
    ],
)
def test_bad_trace_lines_are_named(tmp_path, line, message):
    (tmp_path / "trace.jsonl").write_text(json.dumps(TRACE[0]) + "\n" + line + "\n")
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(trace_path(tmp_path))


def test_missing_or_empty_trace(tmp_path):
    with pytest.raises(TraceError, match="no trace at"):
        trace_path(tmp_path)
    (tmp_path / "trace.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="the trace is empty"):
        read_trace(trace_path(tmp_path))


def test_unknown_picture_suffix(run_dir, tmp_path):
    with pytest.raises(TraceError, match="svg or .png"):
        render_timeline(read_trace(trace_path(run_dir)), tmp_path / "timeline.jpg")
