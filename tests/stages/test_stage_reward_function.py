"""Stage reward_function: scores, reward_extra and metrics from real reward functions in a child process."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from rlflow.batch import Batch
from rlflow.reward.function_calls import RewardFunctionError
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages.base import StageContext
from rlflow.stages.reward_function import RewardFunction, RewardFunctionConfig

PLUGINS = Path(__file__).parents[1] / "reward" / "reward_plugins"
PIPELINE = Pipeline.model_validate({"name": "t", "data": {"train": "x.json"}, "stages": []})


def make_batch(texts: list[str], sources: list[str] | None = None, width: int = 6) -> Batch:
    """What reaches a reward stage: responses, their mask, data sources and reward_info as the loader writes it."""
    mask = np.zeros((len(texts), width), dtype=np.int64)
    for row, text in enumerate(texts):
        mask[row, : min(len(text), width)] = 1
    info = [
        {"ground_truth": "42", "extra_info": {"index": i, "split": "train"}, "ability": "math"}
        for i in range(len(texts))
    ]
    return Batch(
        {"response_mask": mask},
        {"response_text": texts, "data_source": sources or ["gsm8k"] * len(texts), "reward_info": info},
    )


@pytest.fixture
def context():
    made = []

    def make(**config) -> StageContext:
        ctx = StageContext(
            pipeline=PIPELINE,
            config=RewardFunctionConfig(**config),
            stage_name="reward",
            step=3,
            project_root=str(PLUGINS),
        )
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        for held in ctx.state.values():
            held[1].close()


def run(texts, ctx, sources=None) -> Batch:
    return RewardFunction().run(make_batch(texts, sources), ctx)


def test_one_function_keeps_its_extra_keys_bare(context):
    out = run(["42", "41", ""], context(function="rewards.py:with_extras"))
    assert out["scores"].tolist() == [1.0, 0.0, 0.0]
    expected = np.zeros((3, 6), dtype=np.float32)
    expected[0, 1] = 1.0  # on the last response token; an empty response's at index 0
    assert np.array_equal(out["token_level_scores"], expected)
    assert out["reward_extra"] == [{"acc": a, "format_ok": 1.0} for a in (1.0, 0.0, 0.0)]
    assert out.metrics == {
        "reward/acc": pytest.approx(1 / 3),
        "reward/format_ok": 1.0,
        "reward/error_rate": 0.0,
        "reward/timeout_rate": 0.0,
    }


def test_several_functions_are_a_weighted_sum_with_prefixed_keys(context):
    ctx = context(
        functions=[
            {"function": "rewards.py:with_extras", "weight": 2.0, "name": "exact"},
            {"function": "rewards.py:length", "weight": -0.5},
        ]
    )
    out = run(["42", "4100"], ctx)
    assert out["scores"].tolist() == pytest.approx([2.0 - 0.5 * 0.2, -0.5 * 0.4])
    first = {"exact/score": 1.0, "exact/acc": 1.0, "exact/format_ok": 1.0, "length/score": 0.2, "length/acc": 0.2}
    assert out["reward_extra"][0] == first
    assert out.metrics["reward/exact/acc"] == 0.5 and out.metrics["reward/length/score"] == pytest.approx(0.3)


def test_a_bare_number_is_also_acc_as_verls_reward_manager_logs_it(context):
    """verl's reward-loop manager (its V1 trainer's) logs a float score as ``acc``; validation's core
    figure and DAPO's ``filter_groups.metric: acc`` read it."""
    import importlib.util

    import torch
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.runtime.dynamic_sampling import metric_values
    from rlflow.schemas.pipeline import ModelSpec
    from rlflow.stages.validation_metrics import val_metrics

    spec = importlib.util.spec_from_file_location("acc_rewards", PLUGINS / "rewards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tokenizer = load_tokenizer(ModelSpec())
    manager = NaiveRewardManager(config=None, tokenizer=tokenizer, compute_score=module.length)
    theirs, texts = [], []
    for text in ("a", "abcd", "the quick brown fox"):
        ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
        data = DataProto.from_dict(
            tensors={"responses": ids, "attention_mask": torch.ones_like(ids)},
            non_tensors={
                "data_source": np.array(["gsm8k"], dtype=object),
                "reward_model": np.array([{"ground_truth": "42"}], dtype=object),
                "extra_info": np.array([{}], dtype=object),
            },
        )
        theirs.append(manager.loop.run_until_complete(manager.run_single(data))["reward_extra_info"])
        texts.append(tokenizer.decode(ids[0], skip_special_tokens=True))

    out = run(texts, context(function="rewards.py:length"))
    assert out["reward_extra"] == theirs and [e["acc"] for e in theirs] == pytest.approx(out["scores"].tolist())
    assert metric_values(out, "acc", step=1) == [e["acc"] for e in theirs]
    out["uid"] = ["a", "b", "c"]
    assert val_metrics(out, n=1)["val-core/gsm8k/acc/mean@1"] == pytest.approx(float(np.mean(out["scores"])))


def test_the_builtin_math_reward_through_the_stage(context):
    out = run(["so #### 42", "\\boxed{41}", "no idea"], context(function="rlflow.reward.math_answer:compute_score"))
    assert out["scores"].tolist() == [1.0, 0.0, 0.0]
    assert [e["format_ok"] for e in out["reward_extra"]] == [1.0, 1.0, 0.0]


def test_failing_rows_score_zero_with_every_key_and_are_logged_once(context, caplog):
    ctx = context(function="rewards.py:on_cue")
    with caplog.at_level(logging.WARNING, logger="rlflow.reward.function_scores"):
        out = run(["ok", "raise", "nan", "raise", "ok"], ctx, sources=["a", "b", "c", "d", "e"])
        run(["raise", "ok"], ctx)  # the next step: already logged in this worker
    assert out["scores"].tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert [e["acc"] for e in out["reward_extra"]] == [1.0, 0.0, 0.0, 0.0, 1.0]  # failed rows get the key too
    assert out.metrics["reward/error_rate"] == pytest.approx(3 / 5) and out.metrics["reward/timeout_rate"] == 0
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages  # one per kind of failure: raised ValueError, bad return
    raised = next(m for m in messages if "raised ValueError" in m)
    assert "rewards.py:on_cue" in raised and "on row 1 (data_source 'b')" in raised
    assert "reward_plugins/rewards.py:" in raised and "in on_cue: cannot score 'raise'" in raised
    assert any("bad return on row 2 (data_source 'c'): returned float nan" in m for m in messages)


def test_a_row_past_the_deadline_is_a_timeout_and_later_rows_still_score(context):
    ctx = context(function="rewards.py:on_cue", timeout_s=0.5)
    out = run(["sleep", "ok", "hang", "ok"], ctx)
    assert out["scores"].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert out.metrics["reward/timeout_rate"] == 0.5 and out.metrics["reward/error_rate"] == 0


def test_keys_some_rows_lack_are_zero_there(context):
    out = run(["abc", "abcdef"], context(function="rewards.py:keyed_by_source"), sources=["short", "long"])
    assert out["reward_extra"] == [{"acc": 0.25, "len": 0.0}, {"acc": 0.0, "len": 6.0}]  # a bare 0.25 is also acc


def test_a_function_failing_on_every_row_fails_the_step(context):
    ctx = context(functions=[{"function": "rewards.py:length"}, {"function": "rewards.py:always_raises"}])
    with pytest.raises(RewardFunctionError) as info:
        run(["a", "b", "c"], ctx, sources=["s0", "s1", "s2"])
    message = str(info.value)
    assert (
        "'rewards.py:always_raises' failed on all 3 rows this worker scored at step 3 (3 errors, 0 timeouts)" in message
    )
    assert "row 0 (data_source 's0'): raised KeyError: KeyError at " in message and "in always_raises: 's0'" in message


def test_the_child_lives_across_steps_and_a_new_config_replaces_it(context):
    ctx = context(function="rewards.py:pid")
    first = run(["a"], ctx)["scores"].tolist()
    assert run(["b"], ctx)["scores"].tolist() == first
    (_, runner, _) = ctx.state["reward_function:reward"]
    ctx.config = RewardFunctionConfig(function="rewards.py:pid", timeout_s=2)
    run(["c"], ctx)
    assert ctx.state["reward_function:reward"][1] is not runner and runner._child is None


def test_rows_without_ground_truth_are_refused_clearly(context):
    batch = make_batch(["a"])
    batch["reward_info"] = [{"db_path": "/x.sqlite", "gold_sql": "SELECT 1"}]
    with pytest.raises(RewardFunctionError, match=r"row 0: reward_info has no 'ground_truth' and 'extra_info'"):
        RewardFunction().run(batch, context(function="rewards.py:length"))


def test_a_cpu_worker_resolves_file_references_from_the_project_root():
    from rlflow.runtime.worker import StageCall, StageWorker

    spec = {
        "name": "t",
        "data": {"train": "x.json"},
        "resources": {"rw": {"type": "cpu"}},
        "stages": [{"name": "reward", "uses": "reward_function", "on": "rw"}],
    }
    worker = StageWorker(spec, "rw", 0, 1, str(PLUGINS))
    call = StageCall("reward", "reward_function", {"function": "rewards.py:length"}, 1, RewardFunction.reads_fields)
    try:
        out = worker.run_stage(call, make_batch(["abcd"])).batch
    finally:
        worker.state["reward_function:reward"][1].close()
    assert out["scores"].tolist() == [pytest.approx(0.4)]


def test_more_than_64_extra_metrics_are_cut_with_one_warning_naming_the_function(context, caplog):
    ctx = context(function="rewards.py:many_metrics")
    with caplog.at_level(logging.WARNING, logger="rlflow.reward.function_scores"):
        out = run(["a", "b"], ctx)
        run(["c"], ctx)
    assert len(out["reward_extra"][0]) == 64 and len([k for k in out.metrics if k.startswith("reward/m")]) == 61
    assert "reward/a_b" in out.metrics and not any(".." in k or "\n" in k for k in out.metrics)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "rewards.py:many_metrics returned more than 64 extra numbers" in messages[0]


def test_the_functions_output_goes_to_the_run_directory(context, tmp_path):
    ctx = context(function="rewards.py:chatty")
    ctx.run_dir = str(tmp_path)
    run(["a"], ctx)
    ctx.state["reward_function:reward"][1].close()
    assert (tmp_path / "rewards" / "reward.rank0.log").read_text().startswith("hello from stdout")
