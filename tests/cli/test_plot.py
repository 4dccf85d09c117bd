"""`rlflow plot`: reads a run's metrics.jsonl and draws reward and validation curves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rlflow.cli import plot
from rlflow.errors import DataError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_metrics(run: Path, records: list[dict], tail: str = "") -> Path:
    run.mkdir(parents=True, exist_ok=True)
    path = run / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def steps(n: int) -> list[dict]:
    records = []
    for step in range(1, n + 1):
        record = {"step": step, "critic/score/mean": step / n, "reward/acc": step / (2 * n), "actor/pg_loss": 0.1}
        if step % 5 == 0:
            record["val-core/bird/acc/mean@1"] = step / (3 * n)
        records.append(record)
    return records


def app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    plot.register(app)
    return app


def test_plot_writes_an_image(tmp_path):
    run = tmp_path / "runs" / "bird-grpo" / "r1"
    write_metrics(run, steps(20))
    out = tmp_path / "out" / "curve.png"
    result = CliRunner().invoke(app(), ["plot", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG_MAGIC and out.stat().st_size > 5_000


def test_series_hold_reward_and_validation_only(tmp_path):
    path = write_metrics(tmp_path, steps(10), tail='{"step": 11, "critic/sc')
    reward, val = plot.read_series(path)
    assert sorted(reward) == ["critic/score/mean", "reward/acc"]
    assert reward["critic/score/mean"][-1] == (10, 1.0), "the half-written last line is skipped"
    assert val == {"val-core/bird/acc/mean@1": [(5, 5 / 30), (10, 10 / 30)]}


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="no metrics file"):
        plot._metrics_file(tmp_path)


def test_no_plottable_metrics_is_a_clear_error(tmp_path):
    path = write_metrics(tmp_path, [{"step": 1, "actor/pg_loss": 0.3}])
    with pytest.raises(DataError, match="no reward or validation metrics"):
        plot.read_series(path)


def test_bad_line_is_named(tmp_path):
    path = write_metrics(tmp_path, steps(2), tail="not json\n")
    with pytest.raises(DataError, match=r"metrics.jsonl:3: not valid JSON"):
        plot.read_series(path)
    path.write_text('{"no_step": 1}\n')
    with pytest.raises(DataError, match=r":1: each line must be a JSON object with an integer 'step'"):
        plot.read_series(path)
