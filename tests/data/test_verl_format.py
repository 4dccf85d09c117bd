"""Reading verl's RL data format: suffixes, required columns, malformed rows named, values kept plain."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_helpers import verl_row, write_rows

from rlflow.data.verl_format import read_verl_rows, reward_info_of
from rlflow.errors import DataError

ROW = verl_row("openai/gsm8k", "What is 6 x 7?", "42")


def test_rows_read_back_as_written(tmp_path):
    rows = [ROW, {**ROW, "extra_info": {"split": "train", "index": 1}}]
    for name in ("train.parquet", "train.jsonl", "train.json"):
        assert read_verl_rows(write_rows(tmp_path / name, rows), "train") == rows


def test_reward_info_is_every_column_but_prompt_and_data_source(tmp_path):
    info = reward_info_of({**ROW, "extra_info": None})
    assert info == {
        "ground_truth": "42",
        "extra_info": {},
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "42"},
    }
    assert reward_info_of({k: v for k, v in ROW.items() if k not in ("ability", "extra_info")}) == {
        "ground_truth": "42",
        "extra_info": {},
        "reward_model": {"style": "rule", "ground_truth": "42"},
    }


@pytest.mark.parametrize(
    "drop, named",
    [
        ("reward_model", "'reward_model'"),
        ("data_source", "'data_source'"),
        ("prompt", "'prompt'"),
        ("ground_truth", "'reward_model.ground_truth'"),
    ],
)
def test_a_missing_column_is_named_once_for_the_file(tmp_path, drop, named):
    rows = []
    for i in range(3):
        row = {**ROW, "extra_info": {"index": i}}
        if drop == "ground_truth":
            row["reward_model"] = {"style": "rule"}
        else:
            del row[drop]
        rows.append(row)
    path = write_rows(tmp_path / "train.parquet", rows)
    with pytest.raises(DataError) as err:
        read_verl_rows(path, "train")
    message = str(err.value)
    assert message.startswith(f"{path}: no column {named} ") and message.count("\n") == 0
    assert "verl's format needs data_source, prompt, reward_model.ground_truth" in message


def test_malformed_rows_are_each_named_with_row_and_field(tmp_path):
    rows = [
        ROW,
        {**ROW, "prompt": 5},
        {**ROW, "prompt": []},
        {**ROW, "prompt": [{"role": "user", "content": "ok"}, {"role": "user"}]},
        {**ROW, "prompt": ""},
        {**ROW, "data_source": None},
        {**ROW, "reward_model": {"style": "rule", "ground_truth": None}},
        {**ROW, "extra_info": [1, 2]},
        {**ROW, "ability": 3},
        "text",
    ]
    path = write_rows(tmp_path / "train.jsonl", rows)
    with pytest.raises(DataError) as err:
        read_verl_rows(path, "train")
    lines = str(err.value).splitlines()
    expected = [
        "row 1: prompt should be a text or a non-empty list of chat messages",
        "row 2: prompt should be a text or a non-empty list",
        "row 3: prompt[1] should be a chat message {role: <text>, content: <text>}, got {'role': 'user'}",
        "row 4: prompt is an empty text",
        "row 5: misses 'data_source'",
        "row 6: reward_model should be an object with a non-null ground_truth",
        "row 7: extra_info should be an object",
        "row 8: ability should be a text",
        "row 9: is a str, not an object",
    ]
    assert len(lines) == len(expected)
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(f"{path}: {start}"), line


def test_many_bad_rows_are_reported_a_screenful_at_a_time(tmp_path):
    path = write_rows(tmp_path / "train.jsonl", [{**ROW, "prompt": 1}] * 25)
    with pytest.raises(DataError) as err:
        read_verl_rows(path, "train")
    lines = str(err.value).splitlines()
    assert len(lines) == 11 and lines[-1] == "... and 15 more"


@pytest.mark.parametrize("name", ["train.csv", "train"])
def test_an_unknown_suffix_names_the_ones_read(tmp_path, name):
    (tmp_path / name).write_text("data_source,prompt\n")
    with pytest.raises(DataError, match=r"reads \.parquet, \.jsonl \(JSON Lines\) or \.json .*convert the file"):
        read_verl_rows(tmp_path / name, "train")


def test_a_missing_file_names_the_field(tmp_path):
    with pytest.raises(DataError, match=f"data.val: no file at {tmp_path / 'dev.parquet'}"):
        read_verl_rows(tmp_path / "dev.parquet", "val")


def test_a_column_that_is_not_plain_json_is_refused(tmp_path):
    table = pa.Table.from_pylist([ROW]).append_column("created", pa.array([datetime.datetime(2024, 1, 1)]))
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(DataError, match=r"row 0: created holds a datetime value; columns hold plain JSON values"):
        read_verl_rows(tmp_path / "train.parquet", "train")


def test_a_ground_truth_column_would_shadow_the_reward_models(tmp_path):
    path = write_rows(tmp_path / "train.jsonl", [{**ROW, "ground_truth": "7"}])
    with pytest.raises(DataError, match="column 'ground_truth' would clash"):
        read_verl_rows(path, "train")


@pytest.mark.parametrize("name", ["train.jsonl", "train.json"])
def test_hostile_nesting_and_broken_json_are_data_errors(tmp_path, name):
    path = tmp_path / name
    path.write_text("[" * 100_000 + "\n")
    with pytest.raises(DataError, match="nested too deeply"):
        read_verl_rows(path, "train")
    path.write_text(json.dumps(ROW) + "\n{oops\n")
    with pytest.raises(DataError, match=f"{name}:2: not valid JSON"):
        read_verl_rows(path, "train")


def test_a_damaged_parquet_file_is_a_data_error(tmp_path):
    (tmp_path / "train.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="cannot read as Parquet"):
        read_verl_rows(tmp_path / "train.parquet", "train")
