"""The shipped ranking task's data: reproducible from its script, in verl's format, answers right, splits apart,
400 validation questions, and the train split the one the shipped models were trained on."""

from __future__ import annotations

import hashlib
import importlib.util
import json

import pyarrow.parquet as pq
import pytest
from data_helpers import REPO, script_module

DATA = REPO / "rlflow" / "assets" / "data" / "ranking"


@pytest.fixture(scope="module")
def generator():
    with script_module("make_ranking") as module:
        yield module


def test_the_shipped_files_are_what_the_script_makes(generator, tmp_path):
    assert generator.main(["--out", str(tmp_path)]) == 0
    for split in ("train", "val"):
        assert (
            pq.read_table(tmp_path / f"{split}.parquet").to_pylist()
            == pq.read_table(DATA / f"{split}.parquet").to_pylist()
        ), f"{split}.parquet differs from scripts/make_ranking.py's output"


def test_rows_are_verl_records_with_the_right_answer_and_the_splits_share_no_question():
    splits = {split: pq.read_table(DATA / f"{split}.parquet").to_pylist() for split in ("train", "val")}
    assert (len(splits["train"]), len(splits["val"])) == (4000, 400)
    rank = {"largest": -1, "smallest": 0, "second_largest": -2, "second_smallest": 1}
    for rows in splits.values():
        for row in rows:
            numbers = row["extra_info"]["numbers"]
            assert len(set(numbers)) == len(numbers) == 5 and all(0 <= n <= 9 for n in numbers)
            answer = str(sorted(numbers)[rank[row["data_source"]]])
            assert row["reward_model"] == {"style": "rule", "ground_truth": answer}
            assert row["extra_info"]["answer"] == f"#### {answer}"
            (message,) = row["prompt"]
            assert message["role"] == "user" and ", ".join(map(str, numbers)) in message["content"]
            assert row["data_source"].replace("_", " ") in message["content"]
        counts = {source: sum(r["data_source"] == source for r in rows) for source in rank}
        assert len(set(counts.values())) == 1, counts
    questions = {
        split: {(r["data_source"], tuple(r["extra_info"]["numbers"])) for r in rows} for split, rows in splits.items()
    }
    assert not questions["train"] & questions["val"]


def test_the_train_split_is_the_one_the_shipped_models_were_trained_on(generator):
    rows = pq.read_table(DATA / "train.parquet").to_pylist()
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
    assert digest == "2baa500fad1dd5a1b2cb56e8dddfe0e52e8e2096fe4a5f9014d5e25f7aefd9a5"
    before = generator.make_splits(4000, 200, 0, 5)  # the validation split as it was: drawn before train
    assert before["train"] == rows
    assert before["val"] == pq.read_table(DATA / "val.parquet").to_pylist()[:200]


def test_the_reward_is_strict_about_what_follows_the_answer():
    spec = importlib.util.spec_from_file_location("ranking_reward", REPO / "examples" / "ranking" / "reward.py")
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    score = reward.compute_score
    assert score("largest", "#### 9", "9", {})["acc"] == 1.0
    assert score("largest", "  ####9\n", "9", {})["acc"] == 1.0
    assert score("largest", "#### 8", "9", {}) == {"score": 0.0, "acc": 0.0, "format_ok": 1.0, "answered": 1.0}
    run_on = score("largest", "#### 9 #### 9 ####", "9", {})
    assert run_on["acc"] == 0.0 and run_on["format_ok"] == 0.0 and run_on["answered"] == 1.0
    assert score("largest", "nine", "9", {})["answered"] == 0.0
