"""run_text2sql_reward: scores, where they sit, per-row records, metrics and per-worker caches."""

from __future__ import annotations

import numpy as np
import pytest

from rlflow.assets import BIRD_SAMPLE
from rlflow.batch import Batch
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages.base import StageContext
from rlflow.stages.text2sql_reward import Text2SqlReward, Text2SqlRewardConfig

GOLD = "SELECT name FROM dept WHERE city = 'Boston'"
FENCE = "```"


def fenced(sql: str) -> str:
    return f"Here it is:\n{FENCE}sql\n{sql}\n{FENCE}"


def context(**config) -> StageContext:
    spec = Pipeline.model_validate({"name": "t", "data": {"train": "x.json"}, "stages": []})
    return StageContext(pipeline=spec, config=Text2SqlRewardConfig(**config), stage_name="reward")


def make_batch(db, responses: list[str], lengths: list[int], width: int = 6, gold: str = GOLD) -> Batch:
    mask = np.zeros((len(responses), width), dtype=np.int64)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    info = [{"ground_truth": gold, "extra_info": {"db_path": str(db), "question_id": i}} for i in range(len(responses))]
    return Batch({"response_mask": mask}, {"response_text": responses, "reward_info": info})


SCORES = {"correct_score": 1.0, "partial_score": 0.25, "format_score": 0.1}


def test_scores_follow_the_outcome(company_db):
    responses = [
        fenced("SELECT name FROM dept WHERE city = 'Boston'"),  # correct
        fenced("SELECT d.name FROM dept AS d WHERE d.city IN ('Boston') ORDER BY 1 DESC"),  # correct, other order
        fenced("SELECT name FROM dept"),  # runs, wrong
        fenced("SELECT nme FROM dept"),  # extracted, fails
        "I cannot answer that.",  # nothing extracted
        fenced("DROP TABLE dept"),  # refused: 0 even with format_score
    ]
    batch = make_batch(company_db, responses, [3, 6, 2, 1, 4, 5])
    out = Text2SqlReward().run(batch, context(**SCORES))
    assert out["scores"].tolist() == pytest.approx([1.0, 1.0, 0.25, 0.1, 0.0, 0.0])
    assert [e["acc"] for e in out["reward_extra"]] == [1, 1, 0, 0, 0, 0]
    assert [e["format_ok"] for e in out["reward_extra"]] == [1, 1, 1, 1, 0, 1]
    assert [e["error"] for e in out["reward_extra"]] == [0, 0, 0, 1, 0, 1]
    assert out.metrics["reward/acc"] == pytest.approx(2 / 6)
    assert out.metrics["reward/format_ok"] == pytest.approx(5 / 6)
    assert out.metrics["reward/error_rate"] == pytest.approx(2 / 6)
    assert out.metrics["reward/timeout_rate"] == 0


def test_score_sits_on_the_last_response_token(company_db):
    correct = fenced(GOLD)
    batch = make_batch(company_db, [correct, correct, correct], [3, 6, 0])
    scores = Text2SqlReward().run(batch, context())["token_level_scores"]
    assert scores.dtype == np.float32 and scores.shape == (3, 6)
    expected = np.zeros((3, 6), dtype=np.float32)
    expected[0, 2] = expected[1, 5] = expected[2, 0] = 1.0  # an empty response scores at index 0
    assert np.array_equal(scores, expected)


def test_time_bombs_score_zero_and_stop_in_time(company_db):
    import time

    bomb = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"
    batch = make_batch(company_db, [fenced(bomb), fenced("SELECT * FROM emp a, emp b")], [4, 4])
    start = time.monotonic()
    out = Text2SqlReward().run(batch, context(timeout_s=0.3, max_rows=100, **SCORES))
    assert time.monotonic() - start < 2 * 0.3 + 1.5
    assert out["scores"].tolist() == [0.0, 0.0]
    assert [e["timeout"] for e in out["reward_extra"]] == [1, 0]
    assert [e["error"] for e in out["reward_extra"]] == [0, 1]
    assert out.metrics["reward/timeout_rate"] == 0.5


def test_extract_mode_is_honoured(company_db):
    batch = make_batch(company_db, [f"<answer>{GOLD}</answer>", GOLD], [2, 2])
    out = Text2SqlReward().run(batch, context(extract="fenced"))
    assert out["scores"].tolist() == [0.0, 0.0]
    out = Text2SqlReward().run(
        make_batch(company_db, [f"<answer>{GOLD}</answer>", GOLD], [2, 2]), context(extract="answer_tag")
    )
    assert out["scores"].tolist() == [1.0, 0.0]


def test_gold_results_and_connections_are_cached_per_worker(company_db):
    ctx = context()
    Text2SqlReward().run(make_batch(company_db, [fenced(GOLD)], [1]), ctx)
    connection = ctx.state["sql_connections"][str(company_db)]
    assert list(ctx.state["sql_gold_results"]) == [(str(company_db), GOLD)]
    Text2SqlReward().run(make_batch(company_db, [fenced(GOLD)] * 2, [1, 1]), ctx)
    assert ctx.state["sql_connections"][str(company_db)] is connection
    assert len(ctx.state["sql_gold_results"]) == 1


def test_failing_gold_never_scores_correct(company_db):
    batch = make_batch(company_db, [fenced("SELECT 1"), fenced("SELECT nothing")], [1, 1], gold="SELECT nothing")
    out = Text2SqlReward().run(batch, context(**SCORES))
    assert out["scores"].tolist() == pytest.approx([0.25, 0.1])


def test_missing_database_scores_zero(tmp_path):
    batch = make_batch(tmp_path / "gone.sqlite", [fenced(GOLD)], [1])
    out = Text2SqlReward().run(batch, context(**SCORES))
    assert out["scores"].tolist() == [0.0] and out["reward_extra"][0]["error"] == 1
    assert not (tmp_path / "gone.sqlite").exists()


def test_every_sample_gold_answer_scores_correct():
    """The shipped sample end to end: each gold SQL, answered as a model would, scores 1."""
    import hashlib
    import json

    sample = BIRD_SAMPLE
    databases = sample / "databases"
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in databases.rglob("*") if p.is_file()}
    records = json.loads((sample / "dev.json").read_text())
    batch = Batch(
        {"response_mask": np.ones((len(records), 4), dtype=np.int64)},
        {
            "response_text": [fenced(r["SQL"]) for r in records],
            "reward_info": [
                {
                    "ground_truth": r["SQL"],
                    "extra_info": {
                        "db_path": str(databases / r["db_id"] / f"{r['db_id']}.sqlite"),
                        "question_id": r["question_id"],
                    },
                }
                for r in records
            ],
        },
    )
    out = Text2SqlReward().run(batch, context())
    assert out.metrics["reward/acc"] == 1.0 and out["scores"].sum().item() == len(records)
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in databases.rglob("*") if p.is_file()}
    assert after == before
