"""`rlflow plot`: a run's metrics.jsonl -> a multi-panel figure; panels chosen with --metrics, empty ones left out."""

from __future__ import annotations

import json
import struct
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
        record = {"step": step, "critic/score/mean": step / n, "reward/acc": step / n, "actor/pg_loss": 0.1}
        if step % 5 == 0:
            record["val-core/bird/acc/mean@1"] = step / (3 * n)
        records.append(record)
    return records


def app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    plot.register(app)
    return app


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return struct.unpack(">II", data[16:24])


def test_plot_of_a_real_run_draws_every_panel_it_has_data_for(short_run, tmp_path):
    run_dir, _ = short_run
    out = tmp_path / "out" / "curves.png"
    result = CliRunner().invoke(app(), ["plot", str(run_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {out} (reward, val, length, kl, entropy, errors)"
    width, height = png_size(out)
    assert out.stat().st_size > 30_000 and width > height, "two columns, three rows"
    chosen = tmp_path / "chosen.png"
    result = CliRunner().invoke(app(), ["plot", str(run_dir), "-o", str(chosen), "--metrics", "val,actor/grad_norm"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("(val, actor/grad_norm)")
    assert png_size(chosen)[1] < height / 2, "one row of two panels"


def test_run_title_names_the_pipeline_and_the_run(short_run):
    run_dir, _ = short_run
    assert plot.run_title(run_dir / "metrics.jsonl") == f"bird-grpo · run {run_dir.name}"


def test_panels_skip_what_has_no_data_and_equal_reward_and_acc(tmp_path):
    series = plot.read_series(write_metrics(tmp_path, steps(10)))
    chosen = plot.choose_panels(series, None)
    assert [(panel.name, list(data)) for panel, data in chosen] == [
        ("reward", ["critic/score/mean"]),  # reward/acc equals it at every step
        ("val", ["val-core/bird/acc/mean@1"]),
    ]
    assert [p.name for p, _ in plot.choose_panels(series, ["actor/pg_loss"])] == ["actor/pg_loss"]
    with pytest.raises(typer.BadParameter, match="did you mean 'reward'"):
        plot.choose_panels(series, ["rewad"])
    with pytest.raises(DataError, match="nothing to plot: no data for kl, entropy"):
        plot.choose_panels(series, ["kl", "entropy"])


def test_series_skip_the_half_written_last_line(tmp_path):
    path = write_metrics(tmp_path, steps(10), tail='{"step": 11, "critic/sc')
    series = plot.read_series(path)
    assert series["critic/score/mean"][-1] == (10, 1.0)
    assert series["val-core/bird/acc/mean@1"] == [(5, 5 / 30), (10, 10 / 30)]


def test_ema_starts_on_the_data_and_follows_it():
    assert plot.ema([1.0, 1.0, 1.0], 0.9) == pytest.approx([1.0, 1.0, 1.0])
    smoothed = plot.ema([0.0, 1.0, 1.0, 1.0], 0.5)
    assert smoothed[0] == 0.0 and smoothed[1] < 1.0 and smoothed == sorted(smoothed)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="no metrics file"):
        plot.metrics_file(tmp_path)


def test_bad_line_is_named(tmp_path):
    path = write_metrics(tmp_path, steps(2), tail="not json\n")
    with pytest.raises(DataError, match=r"metrics.jsonl:3: not valid JSON"):
        plot.read_series(path)
    path.write_text('{"no_step": 1}\n')
    with pytest.raises(DataError, match=r":1: each line must be a JSON object with an integer 'step'"):
        plot.read_series(path)


def test_a_multi_turn_run_gets_a_turns_panel_and_its_tool_errors_beside_the_reward_errors(tmp_path):
    records = steps(3)
    for r in records:
        r.update({"num_turns/mean": 2.5, "tool_call_counts/mean": 0.8, "tool/error_ratio": 0.1})
        r.update({"tool/run_sql/error_ratio": 0.1, "reward/error_rate": 0.2, "tool/run_sql/calls": 0.8})
    series = plot.read_series(write_metrics(tmp_path / "run", records))
    chosen = dict((p.name, data) for p, data in plot.choose_panels(series, None))
    assert set(chosen["turns"]) == {"num_turns/mean", "tool_call_counts/mean"}
    assert set(chosen["errors"]) == {"reward/error_rate", "tool/error_ratio", "tool/run_sql/error_ratio"}
