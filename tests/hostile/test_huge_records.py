"""One enormous record, and a data file that is not what its name says, through the real CLI: ``rlflow
validate`` refuses what ``rlflow run`` would refuse, with the same line (file and row), exit 2.

The huge line is a hole in a sparse file (200 MB of it, no disk written) and the record cap is lowered
through ``RLFLOW_MAX_RECORD_BYTES``, so the test stays small where the real case is a 2 GB prompt.
"""

from __future__ import annotations

import json
import os

from test_hostile_inputs import PIPELINE, assert_refused, rlflow, sandbox  # noqa: F401 - sandbox: a fixture

HUGE = 200 << 20


def test_a_huge_record_is_refused_by_validate_and_run_alike(sandbox, monkeypatch):  # noqa: F811
    monkeypatch.setenv("RLFLOW_MAX_RECORD_BYTES", str(1 << 20))
    records = json.loads((sandbox / "data" / "train.json").read_text())
    with open(sandbox / "data" / "huge.jsonl", "wb") as out:
        out.write(json.dumps(records[0]).encode() + b"\n")
        out.write(b'{"db_id": "shop", "question": "')
        out.seek(HUGE, os.SEEK_CUR)
        out.write(b'", "SQL": "SELECT 1"}\n')
    (sandbox / "p.yaml").write_text(PIPELINE)
    sets = ("--set", "data.format=jsonl", "--set", "data.train=data/huge.jsonl", "--set", "data.val=null")
    expected = "huge.jsonl: row 1 (line 2) holds"
    validate = rlflow(sandbox, "validate", "p.yaml", *sets, "--set", "data.truncation=error", timeout=120)
    assert_refused(validate, expected, "data.truncation to 'drop'")
    run = rlflow(sandbox, "run", "p.yaml", *sets, "--set", "data.truncation=error", timeout=300)
    assert_refused(run, expected)
    line = next(x for x in validate.stderr.splitlines() if expected in x)
    assert line in run.stderr, "validate and run word the problem alike"

    dropped = rlflow(sandbox, "validate", "p.yaml", *sets, "--set", "data.truncation=drop", timeout=120)
    assert dropped.returncode == 0, dropped.stderr[-2000:]
    assert "left out 1 rows" in dropped.stderr


def test_validate_reads_the_data_as_run_does(sandbox):  # noqa: F811
    (sandbox / "data" / "broken.parquet").write_bytes(b"PAR1" + os.urandom(2000))
    (sandbox / "data" / "rows.jsonl").write_text('{"db_id": "shop", "question": "q"}\n')
    (sandbox / "p.yaml").write_text(PIPELINE)
    broken = rlflow(
        sandbox, "validate", "p.yaml", "--set", "data.format=parquet", "--set", "data.train=data/broken.parquet"
    )
    assert_refused(broken, "broken.parquet: cannot read as Parquet")
    jsonl = ("--set", "data.format=jsonl", "--set", "data.train=data/rows.jsonl", "--set", "data.val=null")
    missing = rlflow(sandbox, "validate", "p.yaml", *jsonl)
    assert_refused(missing, "rows.jsonl: record 0 misses 'SQL'")
    unchecked = rlflow(sandbox, "validate", "--no-check-paths", "p.yaml", *jsonl)
    assert unchecked.returncode == 0, "--no-check-paths reads no data"
