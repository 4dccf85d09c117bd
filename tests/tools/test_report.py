"""Failing tools are reported: the first failure of each kind as a warning, every failure in the tool log,
and a warning when a tool's error ratio stays high for several rollouts."""

from __future__ import annotations

import logging

from rlflow.tools import report
from rlflow.tools.report import HIGH_ROLLOUTS, ToolReport


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_first_failure_of_each_kind_is_a_warning_and_every_one_a_log_line(tmp_path, caplog):
    log_path = tmp_path / "tools" / "rank0.log"
    log_path.parent.mkdir()
    reports = ToolReport(log_path)
    with caplog.at_level(logging.WARNING, logger="rlflow.tools"):
        for _ in range(3):
            reports.failed("run_sql", "raised OperationalError", "OperationalError at sql.py:9 in execute: locked")
        reports.failed("run_sql", "timeout", "no result within timeout_s 2 s")
        reports.failed("(invalid)", "unparsable call", "the tool call is not valid JSON:\x1b[2J\nExpecting value")
    said = warnings(caplog)
    assert len(said) == 3, said
    assert said[0].startswith("tool 'run_sql': raised OperationalError: OperationalError at sql.py:9 in execute")
    assert f"every failed call: {log_path}" in said[0]
    assert "\n" not in said[2] and "\x1b" not in said[2]  # model text is one line on the console
    lines = log_path.read_text().splitlines()
    assert len(lines) == 5 and all(" tool '" in line for line in lines)


def test_the_log_stops_at_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "OUTPUT_CAP_BYTES", 200)
    log_path = tmp_path / "rank0.log"
    reports = ToolReport(log_path)
    for i in range(50):
        reports.failed("t", "timeout", f"call {i}")
    assert 200 <= log_path.stat().st_size < 400


def test_a_tool_whose_error_ratio_stays_high_is_warned_about(caplog):
    reports = ToolReport(None)
    ratios = [1.0, 0.9, 0.2, 1.0, 0.6, 0.5, 0.7, 1.0, 0.0, 0.5, 0.5, 0.5]
    with caplog.at_level(logging.WARNING, logger="rlflow.tools"):
        for ratio in ratios:
            reports.rollout_done({"tool/run_sql/error_ratio": ratio, "tool/error_ratio": ratio, "tool/calls": 1.0})
    said = warnings(caplog)
    # high at rollouts 4-8 (warned once, at the third) and 10-12 (after coming down: warned again)
    assert len(said) == 2, said
    assert said[0].startswith("tool 'run_sql' failed on 50% of its calls in the last rollout")
    assert f"in each of the {HIGH_ROLLOUTS - 1} before it" in said[0]
