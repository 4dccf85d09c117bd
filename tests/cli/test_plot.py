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


def test_a_single_turn_runs_two_turns_get_no_panel(tmp_path):
    records = steps(3)
    for r in records:
        r.update({"num_turns/mean": 2.0, "training/num_turns/mean": 2.0})  # verl's count of a single turn
    series = plot.read_series(write_metrics(tmp_path / "run", records))
    assert "turns" not in {p.name for p, _ in plot.choose_panels(series, None)}


def test_a_long_series_is_averaged_down_as_it_is_read(monkeypatch):
    monkeypatch.setattr(plot, "MAX_POINTS", 4)
    points = plot.Downsampled()
    for step in range(1, 20):
        points.add(step, float(step))
    # 8 points of one record became 4 of two, then 8 of two became 4 of four: 16 records, then 3 more of 4
    assert points.stride == 4
    assert points.finish() == [(1, 2.5), (5, 6.5), (9, 10.5), (13, 14.5), (17, 18.0)]


def test_a_metrics_file_is_read_in_bounded_memory_whatever_its_size(tmp_path):
    import tracemalloc

    keys = [f"actor/metric_{i}" for i in range(20)]
    line = "{" + '"step": %d, ' + ", ".join(f'"{k}": 0.{i + 1}' for i, k in enumerate(keys)) + "}\n"
    path = tmp_path / "metrics.jsonl"
    with path.open("w") as out:
        out.writelines(line % step for step in range(1, 30_001))
    assert path.stat().st_size > 14_000_000
    tracemalloc.start()
    try:
        series = plot.read_series(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert set(series) == set(keys) and all(len(points) <= 2 * plot.MAX_POINTS for points in series.values())
    assert series["actor/metric_0"][0] == (1, 0.1) and series["actor/metric_0"][-1][0] <= 30_000
    assert peak < 5_000_000, f"{peak / 1e6:.1f} MB held reading a {path.stat().st_size / 1e6:.0f} MB file"


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"\xff\xfe\n", r"metrics.jsonl:3: not UTF-8 text \(byte 0xff at column 1\)"),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", r"metrics.jsonl:3: not valid JSON \(nested too deeply to read\)"),
        (b'{"step": 3, "x": "' + b"y" * (2 << 20) + b'"}\n', r"metrics.jsonl: cannot read it: line 3 holds more than"),
    ],
)
def test_a_line_that_cannot_be_read_is_named(tmp_path, tail, message):
    path = write_metrics(tmp_path, steps(2))
    path.write_bytes(path.read_bytes() + tail)
    with pytest.raises(DataError, match=message):
        plot.read_series(path)


def test_more_metric_names_than_a_run_logs_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(plot, "MAX_SERIES", 3)
    path = write_metrics(tmp_path, [{"step": 1, "a": 1, "b": 2, "c": 3}, {"step": 2, "d": 4}])
    with pytest.raises(DataError, match=r"metrics.jsonl:2: more than 3 metric names"):
        plot.read_series(path)


def test_the_picture_is_written_whole_or_the_failure_is_one_line(tmp_path, tiny_disk):
    from rlflow.errors import CannotWrite

    run = tmp_path / "run"
    write_metrics(run, steps(10))
    result = CliRunner().invoke(app(), ["plot", str(run), "-o", str(tmp_path / "x.exe")])
    assert isinstance(result.exception, CannotWrite), result.output
    assert str(result.exception).startswith(f"cannot draw '{tmp_path / 'x.exe'}': matplotlib writes no '.exe' files")
    result = CliRunner().invoke(app(), ["plot", str(run), "-o", "/dev/full"])
    assert str(result.exception) == "/dev/full: cannot write: No space left on device; give -o a path you can write"
    assert not Path("/dev/full.png").exists(), "the name given is the file written"
    target = tiny_disk / "curve.svg"
    target.write_text("previous")
    (tiny_disk / "filler").write_bytes(bytes(56 << 10))  # a few kB left: less than the picture
    result = CliRunner().invoke(app(), ["plot", str(run), "-o", str(target)])
    assert "No space left on device" in str(result.exception) and "wrote" not in result.output
    assert target.read_text() == "previous" and sorted(p.name for p in tiny_disk.iterdir()) == ["curve.svg", "filler"]
    nameless = tmp_path / "curve"
    assert CliRunner().invoke(app(), ["plot", str(run), "-o", str(nameless)]).exit_code == 0
    assert nameless.read_bytes()[:8] == PNG_MAGIC, "no suffix: a PNG under the name given"


def test_a_ppo_run_gets_its_critics_value_loss_and_explained_variance(tmp_path):
    records = steps(6)
    for r in records:
        r.update({"critic/vf_loss": 1.0 / r["step"], "critic/vf_explained_var": 1 - 1.0 / r["step"]})
        r.update({"critic/vf_clipfrac": 0.0, "critic/values/mean": 0.5, "actor/entropy": 1.0})
    run = tmp_path / "run"
    series = plot.read_series(write_metrics(run, records))
    chosen = [(p.name, list(data)) for p, data in plot.choose_panels(series, None)]
    assert chosen == [
        ("reward", ["critic/score/mean"]),
        ("val", ["val-core/bird/acc/mean@1"]),
        ("entropy", ["actor/entropy"]),
        ("value_loss", ["critic/vf_loss"]),
        ("explained_var", ["critic/vf_explained_var"]),
    ]
    out = tmp_path / "ppo.png"
    result = CliRunner().invoke(app(), ["plot", str(run), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {out} (reward, val, entropy, value_loss, explained_var)"
    width, height = png_size(out)
    assert width > height, "two columns, three rows"


def test_a_run_without_a_critic_gets_no_value_panels(tmp_path):
    records = steps(3)
    for r in records:
        r["critic/vf_explained_var"] = 0.2  # without the loss beside it, not a critic's run
    series = plot.read_series(write_metrics(tmp_path / "run", records))
    names = {p.name for p, _ in plot.choose_panels(series, None)}
    assert names.isdisjoint({"value_loss", "explained_var"})
    with pytest.raises(DataError, match="nothing to plot: no data for value_loss"):
        plot.choose_panels(series, ["value_loss"])
