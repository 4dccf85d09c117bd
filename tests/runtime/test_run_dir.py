"""The run directory's files: appended records, truncation on resume."""

from rlflow.runtime.run_dir import RunDir, latest_run


def test_metrics_truncation_drops_later_steps_and_torn_lines(tmp_path):
    rd = RunDir(tmp_path / "p" / "r1")
    for step in range(0, 5):
        rd.append_metrics({"step": step, "x": step * 1.5})
    with (rd.path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 5, "x"')  # a crash mid-line
    assert rd.truncate_metrics_after(2) == 3
    assert [m["step"] for m in rd.read_metrics()] == [0, 1, 2]


def test_latest_run(tmp_path):
    assert latest_run(tmp_path, "p") is None
    a = RunDir(tmp_path / "p" / "a")
    a.write_resolved("name: p\n")
    assert latest_run(tmp_path, "p") == a.path
