"""Metric sinks: TensorBoard event files when configured, nothing for unknown names."""

from __future__ import annotations

from rlflow.runtime.sinks import StepTimer, TensorBoardSink, build_sinks


def test_tensorboard_sink_writes_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    sink.log(1, {"critic/score/mean": 0.5, "note": "text is skipped"})
    sink.log(2, {"critic/score/mean": 0.75})
    sink.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("critic/score/mean")] == [(1, 0.5), (2, 0.75)]


def test_unknown_sink_names_build_nothing(tmp_path):
    assert build_sinks(["console", "jsonl"], tmp_path, "p", {}) == []  # both are always there, built elsewhere
    sinks = build_sinks(["tensorboard"], tmp_path, "p", {})
    for sink in sinks:
        sink.close()
    assert [s.name for s in sinks] == ["tensorboard"]


def test_step_timer_accumulates():
    timer = StepTimer()
    for _ in range(2):
        with timer.time("gen"):
            pass
    assert set(timer.timing) == {"gen"} and timer.timing["gen"] >= 0
