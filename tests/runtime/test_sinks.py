"""Metric sinks: TensorBoard event files, W&B as users set it up, and a sink that cannot start
costing one line, not the run (the console is rlflow.runtime.console's, tested beside it)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlflow.runtime.sinks import StepTimer, TensorBoardSink, build_sinks, run_name, wandb_run_id
from rlflow.schemas.project import LoggingSettings

REPO = Path(__file__).resolve().parents[2]


def test_tensorboard_sink_writes_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    sink.log(1, {"critic/score/mean": 0.5, "note": "text is skipped"})
    sink.log(2, {"critic/score/mean": 0.75})
    sink.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("critic/score/mean")] == [(1, 0.5), (2, 0.75)]


def test_console_and_jsonl_need_no_sink_of_their_own(tmp_path):
    assert build_sinks(LoggingSettings(sinks=["console", "jsonl"]), tmp_path, "p", {}) == []  # built elsewhere


def test_named_tensorboard_starts_and_a_sink_that_cannot_start_is_one_line(tmp_path, caplog, monkeypatch):
    pytest.importorskip("tensorboard")
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    (bad / "tensorboard").write_text("a file where the event folder would go")
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as when the extra is not installed
    settings = LoggingSettings(sinks=["tensorboard", "mlflow"])
    with caplog.at_level(logging.WARNING, logger="rlflow.runtime"):
        started = build_sinks(settings, good, "p", {})
        failed = build_sinks(settings, bad, "p", {})
    assert [s.name for s in started] == ["tensorboard"]
    assert failed == [], "the run goes on with what started"
    for sink in started + failed:
        sink.close()
    lines = [r.getMessage() for r in caplog.records]
    assert all("\n" not in line for line in lines)
    assert (
        sum("metrics sink 'mlflow' did not start" in line and "pip install 'rlflow[mlflow]'" in line for line in lines)
        == 2
    )
    (tb_line,) = [line for line in lines if "'tensorboard' did not start" in line]
    assert tb_line.endswith("; going on without it") and "tensorboard" in tb_line


def wandb_process(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose home holds no W&B login (W&B keeps process-wide state)."""
    pytest.importorskip("wandb")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "NETRC"))}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "HOME": str(home), "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


MODE = "from rlflow.runtime.sinks import wandb_mode; print(wandb_mode({!r}))"


def test_wandb_is_online_when_logged_in_and_offline_otherwise_unless_told(tmp_path):
    assert wandb_process(MODE.format(None), tmp_path).stdout.split()[-1] == "offline"
    key = "0123456789abcdef0123456789abcdef01234567"  # read, never sent: wandb_mode calls no server
    assert wandb_process(MODE.format(None), tmp_path, WANDB_API_KEY=key).stdout.split()[-1] == "online"
    children = MODE.format(None) + "; import psutil; print(len(psutil.Process().children()))"
    assert wandb_process(children, tmp_path, WANDB_API_KEY=key).stdout.split()[-1] == "0", "W&B's service was started"
    assert (
        wandb_process(MODE.format(None), tmp_path, WANDB_API_KEY=key, WANDB_MODE="offline").stdout.split()[-1]
        == "offline"
    )
    assert wandb_process(MODE.format("disabled"), tmp_path, WANDB_MODE="online").stdout.split()[-1] == "disabled"


def test_a_wandb_run_takes_project_name_and_tags_from_rlflow_yaml(tmp_path):
    run_dir = tmp_path / "runs" / "bird-grpo" / "20250101-000000-00001"
    code = f"""
import json, logging
from pathlib import Path
from rlflow.runtime.sinks import build_sinks
from rlflow.schemas.project import LoggingSettings
logging.basicConfig(format="[rlflow] %(message)s")
run_dir = Path({str(run_dir)!r}); run_dir.mkdir(parents=True)
settings = LoggingSettings(sinks=["wandb"], wandb={{"project": "grpo-runs", "tags": ["bird", "cpu"]}})
(sink,) = build_sinks(settings, run_dir, "bird-grpo", {{"trainer": {{"seed": 1}}}})
sink.log(1, {{"critic/score/mean": 0.5}})
print(json.dumps([sink.run.project, sink.run.name, list(sink.run.tags), sink.run.settings.mode]))
sink.close()
"""
    result = wandb_process(code, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    project, name, tags, mode = json.loads(result.stdout.strip().splitlines()[-1])
    assert (project, name, tags, mode) == ("grpo-runs", run_name("bird-grpo", run_dir), ["bird", "cpu"], "offline")
    assert name == "bird-grpo-20250101-000000-00001"
    assert "[rlflow] W&B: not logged in (wandb login, or WANDB_API_KEY); logging offline under" in result.stderr
    assert list((run_dir / "wandb").glob("offline-run-*/run-*.wandb")), "the offline run lies in the run directory"


def test_step_timer_accumulates():
    timer = StepTimer()
    for _ in range(2):
        with timer.time("gen"):
            pass
    assert set(timer.timing) == {"gen"} and timer.timing["gen"] >= 0


def test_a_resumed_run_goes_on_in_the_same_wandb_run(tmp_path):
    """Two sinks on one run directory (a run, then its resume) log to one W&B run id; another directory, another."""
    code = f"""
import json
from pathlib import Path
from rlflow.runtime.sinks import build_sinks
from rlflow.schemas.project import LoggingSettings
settings = LoggingSettings(sinks=["wandb"])
ids = []
for name, step in (("first", 1), ("first", 3), ("second", 1)):
    run_dir = Path({str(tmp_path)!r}) / "runs" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (sink,) = build_sinks(settings, run_dir, "bird-grpo", {{}})
    sink.log(step, {{"critic/score/mean": 0.5}})
    ids.append(sink.run.id)
    sink.close()
print(json.dumps(ids))
"""
    result = wandb_process(code, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    first, resumed, other = json.loads(result.stdout.strip().splitlines()[-1])
    assert first == resumed == wandb_run_id(tmp_path / "runs" / "first") and other != first
