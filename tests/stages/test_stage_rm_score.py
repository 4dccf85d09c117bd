"""Stage ``rm_score`` on a reward-model-only LocalEngine with the shipped ``builtin:tiny-rank-rm``: its score on
each response's last token, its metrics, how a rule stage combines it (replace, add), and that the shipped model
agrees with the ranking rule on fixed responses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rlflow.backends.local.local_engine import LocalEngine
from rlflow.batch import Batch
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages import get_stage_kind
from rlflow.stages.base import StageContext
from rlflow.stages.model_scores import combined

REPO = Path(__file__).resolve().parents[2]
RULE = {"name": "reward", "uses": "reward_function", "on": "cpu_pool"}
RULE_WITH = {"function": "examples/ranking/reward.py:compute_score"}
# (question, right answer, wrong answers): one of each data source of builtin:ranking
QUESTIONS = [
    ("Which number is the largest: 4, 9, 3, 0, 6?", "9", ["4", "3", "0"]),
    ("Which number is the smallest: 7, 2, 5, 8, 3?", "2", ["7", "8", "5"]),
    ("Which number is the second largest: 1, 6, 9, 2, 4?", "6", ["9", "1", "2"]),
    ("Which number is the second smallest: 5, 0, 8, 3, 7?", "3", ["0", "8", "7"]),
]


def chat(question: str) -> str:
    """The prompt as the policy sees it: tiny-rank-warm's chat template with the generation prompt."""
    return f"<|im_start|>user\n{question} Give it after ####.<|im_end|>\n<|im_start|>assistant\n"


def make_pipeline(*, rule: bool, combine: str = "replace", weight: float = 1.0) -> Pipeline:
    stages = [
        {"name": "generate", "uses": "generate", "on": "pool"},
        {"name": "rm_score", "uses": "rm_score", "on": "rm_pool"},
        *([{**RULE, "with": RULE_WITH}] if rule else []),
        {"name": "old_log_prob", "uses": "old_log_prob", "on": "pool"},
        {"name": "advantage", "uses": "grpo_advantage", "on": "driver"},
        {"name": "update_actor", "uses": "update_actor", "on": "pool"},
        {"name": "sync_weights", "uses": "sync_weights", "on": "pool"},
    ]
    return Pipeline.model_validate(
        {
            "name": "rm-test",
            "model": {"path": "builtin:tiny-rank-warm"},
            "data": {"format": "verl", "train": "train.parquet", "max_prompt_length": 64, "max_response_length": 8},
            "algorithm": {"n": 2},
            "trainer": {"train_batch_size": 2, "ppo_mini_batch_size": 2, "log_prob_micro_batch_size_per_gpu": 3},
            "reward_model": {"model_path": "builtin:tiny-rank-rm", "combine": combine, "weight": weight},
            "resources": {
                "pool": {"type": "local", "device": "cpu"},
                "rm_pool": {"type": "local", "device": "cpu"},
                "cpu_pool": {"type": "cpu"},
            },
            "stages": stages,
        }
    )


@pytest.fixture(scope="module")
def engine():
    return LocalEngine(make_pipeline(rule=False), roles=frozenset({"reward_model"}), project_root=REPO)


def responses_batch(rows: list[tuple[str, str, str]], width: int = 8) -> Batch:
    """What reaches rm_score: (question, response, ground truth) rows, the mask 1 over each response's tokens."""
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, (_, response, _) in enumerate(rows):
        mask[i, : min(1 + len(response) // 3, width)] = 1  # some length per row; only its last 1 matters
    return Batch(
        {"response_mask": mask},
        {
            "raw_prompt": [chat(q) for q, _, _ in rows],
            "response_text": [r for _, r, _ in rows],
            "data_source": ["ranking"] * len(rows),
            "reward_info": [{"ground_truth": truth, "extra_info": {}} for *_, truth in rows],
        },
    )


def run(pipeline: Pipeline, engine, name: str, batch: Batch) -> Batch:
    spec = pipeline.stage(name)
    kind = get_stage_kind(spec.uses)
    ctx = StageContext(
        pipeline=pipeline,
        config=kind.parse_config(spec.with_),
        stage_name=name,
        step=1,
        engine=engine,
        reads=kind.reads(pipeline, spec),
        project_root=str(REPO),
    )
    try:
        return kind().run(batch, ctx)
    finally:
        ctx.at_shutdown.close()  # the rule stage's child process


# per data source on the test's 12 questions (chance: 0.5 and 0.2); the shipped model measures 0.83 to 1.0 pairwise
# and 0.5 to 1.0 top-1 there (second_largest/second_smallest the lowest; all 200: reward_model.json's held_out_candidates)
PAIRWISE_MIN, TOP_MIN = 0.75, 0.4

ROWS = [
    (QUESTIONS[0][0], "#### 9", "9"),
    (QUESTIONS[0][0], "#### 4", "9"),
    (QUESTIONS[1][0], "#### 2", "2"),
    (QUESTIONS[1][0], "#### 2 #### 5", "2"),
]


def test_scores_on_the_last_token_and_metrics(engine):
    pipeline = make_pipeline(rule=False)
    out = run(pipeline, engine, "rm_score", responses_batch(ROWS))
    raw = engine.compute_rm_score(responses_batch(ROWS), {"micro_batch_size": None})["rm_scores"].numpy()
    last = responses_batch(ROWS)["response_mask"].sum(-1) - 1
    rm = out["rm_scores"]
    assert rm.shape == (4, 8) and np.count_nonzero(rm) == 4
    assert np.allclose(rm[np.arange(4), last], raw, atol=1e-5)
    # no rule stage: the model's score is the step's
    assert np.array_equal(out["token_level_scores"], rm) and np.allclose(out["scores"], raw, atol=1e-5)
    assert out.metrics["reward_model/score/mean"] == pytest.approx(float(raw.mean()), abs=1e-5)
    assert out.metrics["reward_model/score/max"] == pytest.approx(float(raw.max()), abs=1e-5)
    assert out.metrics["reward_model/score/min"] == pytest.approx(float(raw.min()), abs=1e-5)


@pytest.mark.parametrize("combine", ["replace", "add"])
def test_a_rule_stage_combines_the_models_score(engine, combine):
    pipeline = make_pipeline(rule=True, combine=combine, weight=0.5)
    batch = responses_batch(ROWS)
    scored = run(pipeline, engine, "rm_score", batch)
    assert "token_level_scores" not in scored, "the rule stage writes the step's scores"
    batch.update(scored)
    model = batch["rm_scores"].sum(-1)
    out = run(pipeline, engine, "reward", batch)
    rule = np.array([1.0, 0.0, 1.0, 0.0])
    expected = model if combine == "replace" else rule + model
    assert np.allclose(out["scores"], expected, atol=1e-5)
    assert np.allclose(out["token_level_scores"].sum(-1), expected, atol=1e-5)
    assert [e["acc"] for e in out["reward_extra"]] == rule.tolist(), "the rule's accuracy is still reported"
    assert combined(rule.tolist(), batch, pipeline) == pytest.approx(expected.tolist(), abs=1e-5)
    raw = engine.compute_rm_score(responses_batch(ROWS), {})["rm_scores"].numpy()
    assert np.allclose(model, 0.5 * raw, atol=1e-5), "reward_model.weight scales the model's score"


def test_the_shipped_reward_model_agrees_with_the_rule(engine):
    """On the first 12 validation questions of each data source, each answered with each of its numbers in the
    policy's form ("#### 6"): per source, the right answer outscores the wrong ones of its question in most pairs
    (chance: 0.5; the model is trained on such candidates, so a policy drifting to any of them meets a model
    that ranks them) and tops its question often (chance: 0.2). Figures of all 200: reward_model.json."""
    import pyarrow.parquet as pq

    rows = pq.read_table(REPO / "rlflow" / "assets" / "data" / "ranking" / "val.parquet").to_pylist()
    by_source: dict[str, list[dict]] = {}
    for row in rows:
        if len(by_source.setdefault(row["data_source"], [])) < 12:
            by_source[row["data_source"]].append(row)
    assert sorted(by_source) == ["largest", "second_largest", "second_smallest", "smallest"]
    figures = {}
    for source, questions in by_source.items():
        pairs = ordered = top = 0
        for row in questions:
            question = row["prompt"][0]["content"].removesuffix(" Give it after ####.")
            truth, numbers = row["reward_model"]["ground_truth"], [str(n) for n in row["extra_info"]["numbers"]]
            scores = engine.compute_rm_score(responses_batch([(question, f"#### {n}", truth) for n in numbers]), {})
            scores = scores["rm_scores"]
            right = numbers.index(truth)
            wrong = torch.cat([scores[:right], scores[right + 1 :]])
            pairs, ordered, top = (
                pairs + len(wrong),
                ordered + int((scores[right] > wrong).sum()),
                top + (int(scores.argmax()) == right),
            )
        figures[source] = (ordered / pairs, top / len(questions))
    assert all(pair >= PAIRWISE_MIN and top >= TOP_MIN for pair, top in figures.values()), figures


def test_the_shipped_reward_model_scores_the_rules_clear_cases(engine):
    question = QUESTIONS[0][0]  # the largest of 4, 9, 3, 0, 6
    # only what the warm start writes: off its distribution ("The answer is 9") the model can score high
    rows = [(question, r, "9") for r in ("#### 9", "#### 4", "#### 0", "#### 9 and 6")]
    scores = engine.compute_rm_score(responses_batch(rows), {})["rm_scores"]
    assert scores[0] > 0 and bool((scores[1:] < 0).all()), scores
