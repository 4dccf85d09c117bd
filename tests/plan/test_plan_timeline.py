"""The timeline: trace.jsonl (and startup.jsonl) -> per-stage summary, idle shares and a Gantt chart (SVG/PNG)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from rlflow.plan.timeline import (
    TraceError,
    idle_shares,
    in_steps,
    read_startup,
    read_trace,
    render_resources,
    render_summary,
    render_timeline,
    resource_use,
    steps_in_flight,
    summarize,
    trace_path,
)

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


# what `rlflow run` writes before the first stage: data, Ray, then the pools (the last ends at T0)
STARTUP = [
    ("load data", -9.0, -8.0),
    ("start Ray", -8.0, -3.0),
    ("start actor", -3.0, -2.9),
    ("load model on actor", -2.9, 0.0),
]


@pytest.fixture
def run_dir(tmp_path):
    lines = [json.dumps(r) for r in TRACE]
    lines.insert(3, "")  # blank lines are tolerated
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "startup.jsonl").write_text("".join(
        json.dumps({"phase": p, "start": T0 + a, "end": T0 + b, "attempt": 0}) + "\n" for p, a, b in STARTUP))  # fmt: skip
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
    pieces = [t.strip() for t in ET.parse(out).getroot().itertext()]
    texts = "".join(pieces)
    for label in ("actor (pid 11)", "actor (pid 12)", "scorers (pid 21)", "generate", "reward", "update_actor",
                  "sync_weights", "step 1", "init", "demo run"):  # fmt: skip
        assert label in texts, label
    assert "2" in pieces, "steps after the first are named by their number"


def test_startup_phases_are_their_own_lane(run_dir):
    phases = read_startup(run_dir)
    assert [(p.stage, p.resource, p.step) for p in phases][:2] == [
        ("load data", "start-up", -1),
        ("start Ray", "start-up", -1),
    ]
    assert read_startup(run_dir / "trace.jsonl") == [], "a bare trace file has no start-up beside it"
    (run_dir / "startup.jsonl").write_text('{"phase": "load data"}\n')
    with pytest.raises(TraceError, match=r"startup.jsonl:1: not a start-up phase"):
        read_startup(run_dir)


def test_step_windows_keep_start_up_with_step_0(run_dir):
    spans = [*read_startup(run_dir), *read_trace(trace_path(run_dir))]
    assert {s.step for s in in_steps(spans, (0, 1))} == {-1, 0, 1}
    assert {s.step for s in in_steps(spans, (2, 2))} == {2}
    with pytest.raises(TraceError, match="no step in 5-9"):
        in_steps(spans, (5, 9))


def test_idle_share_is_the_training_time_a_worker_ran_nothing(run_dir):
    idle = idle_shares(read_trace(trace_path(run_dir)))
    # training spans 1..16 s: actor 11 busy 1-4, 6-9, 10-13, 14-16 (11 s); scorers busy 2 s
    assert idle[("actor", 11)] == pytest.approx(4 / 15)
    assert idle[("actor", 12)] == pytest.approx(1 - (4 + 2 + 2) / 15)
    assert idle[("scorers", 21)] == pytest.approx(13 / 15)
    overlapping = [record(1, "a", "r", 1, 0.0, 2.0), record(1, "b", "r", 1, 1.0, 3.0), record(1, "c", "r", 2, 3.0, 4.0)]
    assert idle_shares(read_trace(_trace_file(run_dir, overlapping)))[("r", 1)] == pytest.approx(1 / 4)


def _trace_file(directory, records):
    path = directory / "other.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_svg_timeline_draws_start_up_and_idle_shares(run_dir, tmp_path):
    spans, startup = read_trace(trace_path(run_dir)), read_startup(run_dir)
    out = render_timeline(spans, tmp_path / "t.svg", title="demo run", startup=startup, steps=(0, 1))
    texts = "".join(ET.parse(out).getroot().itertext())
    for label in ("start-up (driver)", "load data", "start Ray", "load model on actor", "idle 25% of training",
                  "seconds since start-up began"):  # fmt: skip
        assert label in texts, label
    assert "step 2" not in texts and "2" not in [t.strip() for t in ET.parse(out).getroot().itertext()]


def test_png_timeline(run_dir, tmp_path):
    out = render_timeline(read_trace(trace_path(run_dir)), tmp_path / "timeline.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "trace.jsonl:2: not valid JSON"),
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


# separate_async: the rollout (its own pool, pid 31) samples step t+1 while the actor (pid 11) trains step t;
# the reward runs on the driver. Step windows 1.0-6.5, 3.0-10.0, 6.5-13.5: 12.5 s of wall, 7 s with two in flight.
ASYNC_TRACE = [
    record(0, "sync_weights", "actor", 11, 0.0, 0.5),
    record(1, "generate", "rollout", 31, 1.0, 3.0),
    record(2, "generate", "rollout", 31, 3.0, 5.0),  # beside step 1's log-probs and update
    record(1, "reward", "driver", 1, 3.0, 3.2),
    record(1, "old_log_prob", "actor", 11, 3.0, 4.0),
    record(1, "update_actor", "actor", 11, 4.0, 6.0),
    record(1, "sync_weights", "actor", 11, 6.0, 6.5),
    record(3, "generate", "rollout", 31, 6.5, 8.5),
    record(2, "reward", "driver", 1, 6.5, 6.7),
    record(2, "old_log_prob", "actor", 11, 6.5, 7.5),
    record(2, "update_actor", "actor", 11, 7.5, 9.5),
    record(2, "sync_weights", "actor", 11, 9.5, 10.0),
    record(3, "reward", "driver", 1, 10.0, 10.2),
    record(3, "old_log_prob", "actor", 11, 10.0, 11.0),
    record(3, "update_actor", "actor", 11, 11.0, 13.0),
    record(3, "sync_weights", "actor", 11, 13.0, 13.5),
]


def test_overlapping_steps_count_their_wall_time_once(tmp_path):
    spans = read_trace(_trace_file(tmp_path, ASYNC_TRACE))
    rows = {(r.stage, r.init): r for r in summarize(spans)}
    assert rows[("generate", False)].share == pytest.approx(6.0 / 12.5)
    assert rows[("update_actor", False)].share == pytest.approx(6.0 / 12.5)
    assert steps_in_flight(spans) == (pytest.approx(7.0), 2)
    assert steps_in_flight(read_trace(_trace_file(tmp_path, TRACE))) == (0.0, 0), "a sync run's steps follow each other"
    three = [record(1, "a", "r", 1, 0.0, 6.0), record(2, "a", "s", 2, 1.0, 5.0), record(3, "a", "t", 3, 2.0, 3.0)]
    assert steps_in_flight(read_trace(_trace_file(tmp_path, three))) == (pytest.approx(4.0), 2), (
        "three at once count once"
    )


def test_resource_busy_and_idle_shares_of_an_overlapping_run(tmp_path):
    spans = read_trace(_trace_file(tmp_path, ASYNC_TRACE))
    use = {r.resource: r for r in resource_use(spans)}
    assert list(use) == ["rollout", "driver", "actor"]  # in order of first use in training
    assert (use["rollout"].workers, use["rollout"].busy_s, use["rollout"].wall_s) == (1, 6.0, 12.5)
    assert use["rollout"].idle == pytest.approx(1 - 6.0 / 12.5)
    assert use["actor"].busy_s == pytest.approx(10.5) and use["actor"].idle == pytest.approx(2.0 / 12.5)
    text = render_resources(spans).splitlines()
    assert text[0].split() == ["resource", "workers", "busy_s", "busy", "idle"]
    assert text[1].split() == ["rollout", "1", "6.000", "48.0%", "52.0%"]
    assert text[3].split() == ["actor", "1", "10.500", "84.0%", "16.0%"]
    assert (
        text[-1]
        == "steps in flight together: 7.000 s of 12.500 s wall (2 of 3 steps started before an earlier one ended)"
    )
    assert render_resources(in_steps(spans, (0, 0))) == "", "no training step shown, nothing to share"


def test_svg_timeline_of_overlapping_steps_names_steps_and_resource_idle_shares(tmp_path):
    out = render_timeline(read_trace(_trace_file(tmp_path, ASYNC_TRACE)), tmp_path / "t.svg", title="async run")
    texts = "".join(ET.parse(out).getroot().itertext())
    for label in ("rollout (pid 31)", "actor (pid 11)", "idle share of training by resource: rollout 52%, driver 95%, "
                  "actor 16%", "generate 2", "update_actor 1"):  # fmt: skip
        assert label in texts, label


def _many_steps(path, steps: int, workers: int = 4):
    """A trace of ``steps`` steps of three stages on ``workers`` actor workers and one reward worker."""
    with path.open("w") as out:
        at = 0.0
        for step in range(1, steps + 1):
            for stage in ("generate", "reward", "update_actor"):
                for pid in (21,) if stage == "reward" else range(11, 11 + workers):
                    resource = "scorers" if stage == "reward" else "actor"
                    out.write(json.dumps(record(step, stage, resource, pid, at, at + 0.01)) + "\n")
                at += 0.02
    return path


def test_a_trace_is_read_a_line_at_a_time_and_only_the_chosen_steps_are_held(tmp_path):
    import tracemalloc

    path = _many_steps(tmp_path / "trace.jsonl", 15_000)
    assert path.stat().st_size > 15_000_000
    tracemalloc.start()
    try:
        chosen = read_trace(path, (1, 10))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert {s.step for s in chosen} == set(range(1, 11)) and len(chosen) == 10 * 9
    assert peak < 2_000_000, f"{peak / 1e6:.1f} MB held for 90 spans of a {path.stat().st_size / 1e6:.0f} MB trace"
    with pytest.raises(TraceError, match=r"no step in 20000-20001 \(it holds steps 0-15000\)"):
        read_trace(path, (20_000, 20_001))


def test_more_spans_than_a_timeline_holds_are_refused_with_the_size_and_the_way_out(tmp_path, monkeypatch):
    from rlflow.plan import timeline

    monkeypatch.setattr(timeline, "MAX_SPANS", 50)
    path = _many_steps(tmp_path / "trace.jsonl", 20)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert str(caught.value) == (
        f"{path}: more than 50 stage calls (0 MB; step 6 by line 51), the most a timeline holds; "
        "choose fewer steps with --steps FIRST-LAST"
    )
    assert len(read_trace(path, (1, 5))) == 45


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"\xff\xfe", "trace.jsonl:2: not UTF-8 text (byte 0xff at column 1)"),
        (b"[" * 30_000 + b"]" * 30_000, "trace.jsonl:2: not valid JSON (nested too deeply to read)"),
        (b"[" * 70_000, "trace.jsonl: cannot read it: line 2 holds more than 65536 bytes"),
    ],
)
def test_unreadable_trace_lines_are_named(tmp_path, line, message):
    (tmp_path / "trace.jsonl").write_bytes(json.dumps(TRACE[0]).encode() + b"\n" + line + b"\n")
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(trace_path(tmp_path))


def test_a_last_line_still_being_written_is_left_out(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps(TRACE[0]) + "\n" + json.dumps(TRACE[1]) + "\n" + json.dumps(TRACE[2])[:20])
    assert [s.stage for s in read_trace(path)] == ["sync_weights", "generate"]


def test_spans_too_close_to_tell_apart_are_merged_keeping_each_stages_time():
    from rlflow.plan.timeline import Span
    from rlflow.plan.timeline_chart import coalesce

    lane = [Span(1, stage, "actor", 11, t, t + 0.1) for t, stage in [(0.0, "a"), (0.2, "b"), (0.4, "a"), (2.0, "b")]]
    other = [Span(1, "c", "scorers", 21, 0.1, 0.3)]
    bars = coalesce(sorted(lane + other, key=lambda s: s.start), bucket_s=1.0)
    assert [(s.resource, s.stage, s.start, round(s.end - s.start, 9)) for s in bars] == [
        ("actor", "a", 0.0, 0.2),  # a's two calls in the first second, then b's one beside it
        ("scorers", "c", 0.1, 0.2),
        ("actor", "b", pytest.approx(0.2), 0.1),
        ("actor", "b", 2.0, 0.1),
    ]


def test_a_huge_timeline_is_drawn_merged_and_many_workers_share_a_lane_per_resource(tmp_path, monkeypatch):
    from rlflow.plan import timeline_chart

    monkeypatch.setattr(timeline_chart, "MAX_BARS", 100)
    monkeypatch.setattr(timeline_chart, "MAX_LANES", 3)
    spans = read_trace(_many_steps(tmp_path / "trace.jsonl", 300))
    out = render_timeline(spans, tmp_path / "t.svg", title="long run")
    texts = "".join(ET.parse(out).getroot().itertext())
    for label in ("actor (4 workers)", "scorers (1 workers)", "long run", "generate", "update_actor"):
        assert label in texts, label
    assert "pid 11" not in texts
