"""Metric sinks: plain console lines off a terminal, TensorBoard event files when configured."""

from __future__ import annotations

import io

from rlflow.runtime.sinks import ConsoleSink, StepTimer, TensorBoardSink, build_sinks


def test_console_prints_a_plain_line_per_step_off_a_terminal():
    out = io.StringIO()
    sink = ConsoleSink(total_steps=3, start_step=1, stream=out)
    sink.log(2, {"critic/score/mean": 0.25, "timing_s/step": 1.5, "val-core/bird/acc/mean@1": 0.4})
    assert out.getvalue() == "[rlflow] step 2/3 reward=0.25  step_s=1.5 val-core/bird/acc/mean@1=0.4\n"


def test_tensorboard_sink_writes_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    sink.log(1, {"critic/score/mean": 0.5, "note": "text is skipped"})
    sink.log(2, {"critic/score/mean": 0.75})
    sink.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("critic/score/mean")] == [(1, 0.5), (2, 0.75)]


def test_unknown_or_missing_sinks_fall_back_to_the_console(tmp_path):
    sinks = build_sinks(["console", "jsonl"], tmp_path, "p", {}, 3, 1)
    assert [type(s).__name__ for s in sinks] == ["ConsoleSink"]


def test_step_timer_accumulates():
    timer = StepTimer()
    for _ in range(2):
        with timer.time("gen"):
            pass
    assert set(timer.timing) == {"gen"} and timer.timing["gen"] >= 0
