"""The run's console: compact step lines, phases with durations, plain lines off a terminal, -q and -v."""

from __future__ import annotations

import io
import time

import pytest

from rlflow.runtime.console import NORMAL, QUIET, VERBOSE, RunConsole, StepClock, compact_metrics, duration

# one step of a real run (tests/cli/test_run.py runs one), trimmed to what the console reads or must skip
STEP = {
    "training/global_step": 3,
    "critic/score/mean": 0.3828125,
    "reward/acc": 0.3828125,
    "response_length/mean": 17.8125,
    "actor/kl_loss": 0.0036102354019362792,
    "actor/entropy": 0.18650275468826294,
    "actor/pg_loss": 0.011372012767424167,
    "actor/grad_norm": 0.4576045423746109,
    "perf/throughput": 2948.166333437042,
    "timing_s/gen": 1.8365130329984822,
    "timing_s/update_actor": 2.095640646000902,
    "timing_s/step": 5.481373223999981,
    "val-core/bird/acc/mean@1": 0.47,
    "val-aux/bird/error/mean@1": 0.13,
}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_compact_metrics_are_short_names_with_one_of_equal_reward_and_acc():
    assert compact_metrics(STEP) == [
        ("reward", "0.383"),
        ("len", "17.8"),
        ("kl", "0.00361"),
        ("entropy", "0.187"),
        ("val bird/acc", "0.47"),
    ]
    differing = compact_metrics({**STEP, "reward/acc": 0.25})
    assert differing[:2] == [("reward", "0.383"), ("acc", "0.25")]


def test_compact_metrics_verbose_and_validation_names():
    verbose = dict(compact_metrics(STEP, verbose=True))
    assert verbose["pg_loss"] == "0.0114" and verbose["grad_norm"] == "0.458" and verbose["tok/s"] == "2.95e+03"
    val = compact_metrics({"val-core/spider/reward/mean@4": 0.5, "val-core/spider/reward/best@4/mean": 0.9})
    assert val == [("val spider/reward@4", "0.5")], "only mean@N is shown, @1 left implicit"


def test_step_line_off_a_terminal_is_one_plain_line_with_an_eta():
    out = io.StringIO()
    console = RunConsole(NORMAL, out)
    console.total = 100
    line = console.step_line(3, STEP, eta=542.0)
    assert line.plain == (
        "step 3/100  reward 0.383  len 17.8  kl 0.00361  entropy 0.187  val bird/acc 0.47  5.5 s/step  eta 9m02s"
    )
    assert len(line.plain) < 120 and "val-core/" not in line.plain


def test_plain_output_narrates_phases_and_steps_without_redraws():
    out = io.StringIO()
    console = RunConsole(NORMAL, out)
    recorded = []
    console.on_phase = lambda label, start, end: recorded.append((label, end - start))
    console.header("running demo: /runs/demo/1", [("model", "tiny"), ("pool actor_pool", "local, 1 worker")])
    with console.phase("start Ray") as phase:
        phase.detail = "embedded, 1 node"
    with console.phase("validate before training", record=False):
        pass
    console.total = 2
    console.start_training(2, 1)
    console.log(0, {"val-core/bird/acc/mean@1": 0.3})
    console.log(1, STEP)
    console.close()
    console.summary(1, "/runs/demo/1")
    lines = out.getvalue().splitlines()
    assert all(line.startswith("[rlflow] ") for line in lines)
    assert lines[0] == "[rlflow] running demo: /runs/demo/1"
    assert lines[1] == "[rlflow]   model            tiny"
    assert lines[3].startswith("[rlflow] start Ray: 0.0 s (embedded, 1 node)")
    assert lines[4].startswith("[rlflow] validate before training: 0.0 s")
    assert lines[5] == "[rlflow] step 0/2  val bird/acc 0.3"
    assert lines[6].startswith("[rlflow] step 1/2  reward 0.383") and " eta " in lines[6]
    assert lines[7].startswith("[rlflow] run finished at step 1 in ")
    assert lines[8] == "[rlflow]   last: reward 0.383  len 17.8  kl 0.00361  entropy 0.187  val bird/acc 0.47"
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert [label for label, _ in recorded] == ["start Ray"] and recorded[0][1] >= 0


def test_quiet_says_only_the_summary():
    out = io.StringIO()
    console = RunConsole(QUIET, out)
    console.header("running demo: /runs/demo/1", [("model", "tiny")])
    with console.phase("start Ray"):
        pass
    console.start_training(2, 1)
    console.log(1, STEP)
    assert out.getvalue() == ""
    console.summary(1, "/runs/demo/1")
    assert out.getvalue().splitlines()[0].startswith("[rlflow] run finished at step 1")
    assert "run directory: /runs/demo/1" in out.getvalue()


def test_verbose_announces_phases_and_times_stages():
    out = io.StringIO()
    console = RunConsole(VERBOSE, out)
    with console.phase("load data"):
        pass
    console.log(1, STEP)
    text = out.getvalue()
    assert "[rlflow] load data ...\n[rlflow] load data: " in text
    assert "stage seconds: gen 1.84  update_actor 2.10\n" in text
    assert "pg_loss 0.0114" in text


def test_a_phase_waited_on_late_keeps_its_own_start_and_end():
    out = io.StringIO()
    console = RunConsole(NORMAL, out)
    recorded = []
    console.on_phase = lambda label, start, end: recorded.append((label, start, end))
    now = time.time()
    with console.phase("start reward_pool", since=now - 3.0) as phase:  # began 3 s ago, ended 1 s ago
        phase.end = now - 1.0
        phase.detail = "2 CPU workers"
    with console.phase("load data", since=now - 2.0):  # began 2 s ago, ends now
        pass
    lines = out.getvalue().splitlines()
    assert lines[0] == "[rlflow] start reward_pool: 2.0 s (2 CPU workers)"
    assert lines[1].startswith("[rlflow] load data: 2.0 s")
    assert recorded[0] == ("start reward_pool", now - 3.0, now - 1.0)
    assert recorded[1][1] == now - 2.0 and recorded[1][2] >= now


def test_failed_phase_is_named_and_not_recorded():
    out = io.StringIO()
    console = RunConsole(NORMAL, out)
    recorded = []
    console.on_phase = lambda *args: recorded.append(args)
    with pytest.raises(RuntimeError), console.phase("start Ray"):
        raise RuntimeError("no raylet")
    assert out.getvalue().startswith("[rlflow] start Ray: failed after ") and recorded == []


def test_terminal_gets_colour_a_spinner_and_a_bar():
    out = Terminal()
    console = RunConsole(NORMAL, out)
    with console.phase("start Ray"):
        pass
    console.start_training(2, 1)
    console.log(1, STEP)
    console.close()
    text = out.getvalue()
    assert "\x1b[" in text and "✓ start Ray: " in text and "[rlflow]" not in text
    assert "step 1/2" in text and "━" in text, "the progress bar is drawn"


def test_eta_is_the_mean_recent_step_time_times_the_steps_left():
    clock = StepClock()
    assert clock.eta(10) is None
    clock.recent.extend([4.0, 6.0])
    assert clock.eta(10) == pytest.approx(50.0)


@pytest.mark.parametrize(("seconds", "text"), [(4.24, "4.2 s"), (185, "3m05s"), (3725, "1h02m")])
def test_durations_read_at_a_glance(seconds, text):
    assert duration(seconds) == text
