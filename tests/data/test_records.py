"""Data read with bounded memory: a record too large to hold (a sparse 200 MB JSON Lines line, a Parquet
cell) is skipped without being held, then refused or left out per ``data.truncation``, naming file and row."""

from __future__ import annotations

import json
import os
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_helpers import bird_record, verl_row, write_rows

from rlflow.data import records
from rlflow.data.records import read_records
from rlflow.data.verl_format import read_verl_rows
from rlflow.errors import DataError

CAP = 1 << 20
HUGE = 200 << 20


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(records, "MAX_RECORD_BYTES", CAP)


def sparse_jsonl(path, rows: list, huge_at: int):
    """JSON Lines with a line of HUGE bytes (mostly a hole: no disk, no write time) at position ``huge_at``."""
    with open(path, "wb") as out:
        for i, row in enumerate(rows):
            if i == huge_at:
                out.write(b'{"data_source": "x", "prompt": "')
                out.seek(HUGE, os.SEEK_CUR)
                out.write(b'"}\n')
            out.write(json.dumps(row).encode() + b"\n")
    return path


def test_a_huge_json_lines_record_is_refused_naming_the_row_without_being_held(tmp_path, small_cap):
    rows = [verl_row("s", f"q{i}", str(i), index=i) for i in range(3)]
    path = sparse_jsonl(tmp_path / "train.jsonl", rows, huge_at=1)
    assert path.stat().st_size > HUGE
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as caught:
            read_verl_rows(path, "train")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * CAP, f"held {peak} bytes reading a {HUGE}-byte line"
    message = str(caught.value)
    assert message.startswith(f"{path}: row 1 (line 2) holds {HUGE + 35} bytes or more, over the {CAP}")
    assert "data.truncation to 'drop'" in message and "RLFLOW_MAX_RECORD_BYTES" in message


@pytest.mark.parametrize("truncation", ["drop", "left"])
def test_with_drop_or_left_the_huge_record_is_left_out_and_counted(tmp_path, small_cap, truncation, caplog):
    rows = [verl_row("s", f"q{i}", str(i), index=i) for i in range(3)]
    path = sparse_jsonl(tmp_path / "train.jsonl", rows, huge_at=1)
    stats: dict = {}
    kept = read_verl_rows(path, "train", truncation, stats)
    assert kept == rows and stats == {"dropped_too_long": 1}
    assert "left out 1 rows" in caplog.text and "1 (line 2)" in caplog.text


def test_a_huge_text_to_sql_record_keeps_the_others_question_ids(tmp_path, small_cap):
    rows = [{"db_id": "shop", "question": f"q{i}", "SQL": "SELECT 1"} for i in range(3)]  # no question_id
    path = sparse_jsonl(tmp_path / "train.jsonl", rows, huge_at=2)
    with pytest.raises(DataError, match=r"train.jsonl: row 2 \(line 3\)"):
        read_records(path, "jsonl", "train")
    kept = read_records(path, "jsonl", "train", "drop")
    assert [r["question"] for r in kept] == ["q0", "q1", "q2"]
    assert [r["question_id"] for r in kept] == [0, 1, 3]  # the position in the file, as without the huge row


def test_a_giant_parquet_cell_is_never_decoded(tmp_path, small_cap):
    rows = [verl_row("s", f"q{i}", str(i), index=i) for i in range(4)]
    rows[2]["prompt"] = [{"role": "user", "content": "x" * (3 * CAP)}]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=1)
    with pytest.raises(DataError, match=r"train.parquet: row 2 \(row group 2\) holds \d+ bytes or more"):
        read_verl_rows(path, "train")
    stats: dict = {}
    assert read_verl_rows(path, "train", "drop", stats) == rows[:2] + rows[3:]
    assert stats == {"dropped_too_long": 1}


def test_a_json_document_over_its_cap_asks_for_json_lines(tmp_path, monkeypatch):
    path = write_rows(tmp_path / "train.json", [bird_record("shop", "q" * 2000, "SELECT 1")])
    monkeypatch.setattr(records, "MAX_DOCUMENT_BYTES", 1000)
    with pytest.raises(DataError, match="more than 1000 bytes.* in one JSON document; write the records as JSON Lines"):
        read_records(path, "bird", "train")


def test_a_fifo_as_data_file_is_refused_at_once(tmp_path):
    for name, read in (("a.jsonl", lambda p: read_records(p, "jsonl", "train")), ("b.parquet", read_verl_rows)):
        os.mkfifo(tmp_path / name)
        with pytest.raises(DataError, match="a FIFO"):
            read(tmp_path / name) if name.endswith("jsonl") else read(tmp_path / name, "train")


def test_a_giant_cell_in_a_row_group_of_small_rows_is_caught_after_decoding(tmp_path, small_cap):
    rows = [verl_row("s", "q" * 1000, str(i), index=i) for i in range(8)]
    rows[5]["prompt"] = [{"role": "user", "content": "x" * (2 * CAP)}]  # 2 MiB among 8 rows: under the cap per row
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DataError, match=r"train.parquet: row 5 \(row group 0\) holds \d+ bytes or more"):
        read_verl_rows(path, "train")
    assert read_verl_rows(path, "train", "drop") == rows[:5] + rows[6:]
