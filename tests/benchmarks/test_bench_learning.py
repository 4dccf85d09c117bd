"""bench_learning's ``--quick`` path for the BIRD task (one 2-step ``rlflow run`` validated before and after, its
table and JSON), and ``--plot`` drawing that result against wall time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks import common


def _learning(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_learning", *args],
        cwd=common.ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    folder = tmp_path_factory.mktemp("learning")
    out = folder / "learning_quick.json"
    done = _learning("--quick", "--runs-root", str(folder / "runs"), "--out", str(out))
    return folder, done, json.loads(out.read_text())


def test_the_quick_bird_run_is_validated_before_and_after(quick):
    folder, done, report = quick
    assert report["task"] == "bird" and report["pipeline"] == "pipelines/bird_grpo.yaml" and report["quick"] is True
    assert report["goal"]["min_delta"] == 0.15 and report["goal"]["max_minutes"] == 15.0
    assert isinstance(report["passed"], bool)
    (run,) = report["runs"]
    assert run["seed"] == 1 and run["last_step"] == 2 and run["run_dir"].startswith(str(folder / "runs" / "bird"))
    assert set(run["val_acc_by_step"]) == set(run["val_minutes_by_step"]) == {"0", "2"}
    assert all(0 <= acc <= 1 for acc in run["val_acc_by_step"].values())
    assert run["delta"] == pytest.approx(run["after"] - run["before"])
    assert 0 < run["val_minutes_by_step"]["0"] < run["val_minutes_by_step"]["2"] < run["wall_minutes"]
    assert run["cpu_minutes"] > 0 and len(run["train_score_by_step"]) == 2
    assert "| seed | val acc before |" in done.stdout


def test_plot_draws_the_quick_result_against_wall_time(quick):
    folder, _, _ = quick
    picture = folder / "learning.png"
    _learning("--plot", str(folder / "learning_quick.json"), "-o", str(picture))
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
