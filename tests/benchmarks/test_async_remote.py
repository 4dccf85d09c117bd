"""The remote case's step time: the period between step ends, which an overlapped run keeps meaningful."""

from __future__ import annotations

from benchmarks.async_remote import step_ends, step_period


def _record(step: int, stage: str, start: float, end: float) -> dict:
    return {"step": step, "stage": stage, "resource": "x", "start": start, "end": end}


def test_lockstep_steps_take_their_own_span():
    trace = [_record(0, "sync_weights", 0, 1)]
    for step in range(1, 5):  # each step: generate 2 s then update 1 s, one after the other
        t = 1 + 3 * (step - 1)
        trace += [_record(step, "generate", t, t + 2), _record(step, "update_actor", t + 2, t + 3)]
    assert step_ends(trace) == {1: 4, 2: 7, 3: 10, 4: 13}
    assert step_period(trace, skip=2) == 3.0
    assert step_period(trace, skip=0) == 3.0  # from the first step's start


def test_overlapped_steps_count_by_their_ends_not_their_own_timers():
    # step s+1's generate (2 s) runs beside step s's update (1 s): a step ends every 2 s, though
    # each step's own records still span 3 s
    trace = [_record(1, "generate", 0, 2)]
    for step in range(1, 5):
        trace.append(_record(step, "update_actor", 2 * step, 2 * step + 1))
        trace.append(_record(step + 1, "generate", 2 * step, 2 * step + 2))
    trace = [r for r in trace if r["step"] <= 4]
    assert step_period(trace, skip=2) == 2.0


def test_too_few_steps_give_no_figure():
    assert step_period([_record(1, "generate", 0, 1), _record(2, "generate", 1, 2)], skip=2) is None
    assert step_period([], skip=0) is None
