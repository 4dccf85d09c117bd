"""DAPO's overlong buffer: the reward_function stage's shaped scores equal verl's DAPO reward manager's.

Both sides score the same tokenized responses with the same function (``rewards.py:length``,
which gives every response a different score): verl's ``DAPORewardManager`` decodes them
itself, rlflow's stage gets the decoded text as its rollout would hand it over.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rlflow.batch import Batch
from rlflow.reward.overlong import OverlongBuffer, overlong_penalties
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages.base import StageContext
from rlflow.stages.reward_function import RewardFunction, RewardFunctionConfig

PLUGINS = Path(__file__).parent / "reward_plugins"
MAX_RESP = 12
TEXTS = ["a", "ab cd", "the quick brown fox", "one two three four five six seven", "x " * 30, "SELECT 1 FROM t"]


@pytest.fixture(scope="module")
def tokenizer():
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    return load_tokenizer(ModelSpec())


def length_function():
    spec = importlib.util.spec_from_file_location("overlong_rewards", PLUGINS / "rewards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.length


def tokenized(tokenizer):
    """Prompts and right-padded responses (cut at MAX_RESP tokens), verl's attention mask, the decoded texts."""
    import torch

    rows = [tokenizer.encode(t, add_special_tokens=False)[:MAX_RESP] for t in TEXTS]
    pad = tokenizer.pad_token_id
    responses = torch.full((len(rows), MAX_RESP), pad, dtype=torch.long)
    response_mask = torch.zeros((len(rows), MAX_RESP), dtype=torch.long)
    for r, ids in enumerate(rows):
        responses[r, : len(ids)] = torch.tensor(ids)
        response_mask[r, : len(ids)] = 1
    prompts = torch.full((len(rows), 3), 5, dtype=torch.long)
    attention = torch.cat([torch.ones_like(prompts), response_mask], dim=-1)
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in rows]
    return prompts, responses, response_mask, attention, texts


def verl_dapo(tokenizer, buffer: dict, prompts, responses, attention, count: int) -> dict:
    """verl's ``DAPORewardManager`` on the tokenized responses (it reads their lengths from ``attention``)."""
    from verl.protocol import DataProto
    from verl.workers.reward_manager.dapo import DAPORewardManager

    cfg = SimpleNamespace(**buffer)
    manager = DAPORewardManager(
        tokenizer, num_examine=0, compute_score=length_function(), max_resp_len=MAX_RESP, overlong_buffer_cfg=cfg
    )
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attention},
        non_tensors={
            "data_source": np.array(["t"] * count, dtype=object),
            "reward_model": np.array([{"ground_truth": "0"} for _ in range(count)], dtype=object),
            "extra_info": np.array([{"index": i} for i in range(count)], dtype=object),
        },
    )
    return manager(data, return_dict=True)


def rlflow_stage(buffer: dict, response_mask, texts: list[str]) -> Batch:
    """The reward_function stage on the same responses, as its rollout hands them over."""
    pipeline = Pipeline.model_validate(
        {"name": "t", "data": {"train": "x.json", "max_response_length": MAX_RESP}, "stages": []}
    )
    ctx = StageContext(
        pipeline=pipeline,
        config=RewardFunctionConfig(function="rewards.py:length", overlong_buffer=buffer),
        stage_name="reward",
        step=1,
        project_root=str(PLUGINS),
    )
    info = [{"ground_truth": "0", "extra_info": {"index": i}} for i in range(len(texts))]
    batch = Batch(
        {"response_mask": response_mask.numpy()},
        {"response_text": texts, "data_source": ["t"] * len(texts), "reward_info": info},
    )
    try:
        return RewardFunction().run(batch, ctx)
    finally:
        for held in ctx.state.values():
            held[1].close()


@pytest.mark.parametrize(("buffer_len", "factor", "log"), [(6, 1.0, True), (4, 0.5, False), (12, 2.0, True)])
def test_shaped_scores_equal_verls_dapo_reward_manager(tokenizer, buffer_len, factor, log):
    prompts, responses, response_mask, attention, texts = tokenized(tokenizer)
    lengths = response_mask.sum(-1).tolist()
    assert min(lengths) < MAX_RESP - buffer_len < max(lengths) or buffer_len == MAX_RESP  # both sides of the cut
    buffer = {"enable": True, "len": buffer_len, "penalty_factor": factor, "log": log}
    theirs = verl_dapo(tokenizer, buffer, prompts, responses, attention, len(texts))
    out = rlflow_stage(buffer, response_mask, texts)

    assert np.array_equal(out["token_level_scores"], theirs["reward_tensor"].numpy())
    assert (out["scores"] < np.asarray([len(t) / 10 for t in texts], dtype=np.float32)).any()  # some were cut
    if log:
        extra = theirs["reward_extra_info"]
        assert [e["overlong_reward"] for e in out["reward_extra"]] == [float(v) for v in extra["overlong_reward"]]
        assert [bool(e["overlong"]) for e in out["reward_extra"]] == [bool(v) for v in extra["overlong"]]
    penalties = overlong_penalties(np.array(lengths), OverlongBuffer(**buffer), MAX_RESP)
    assert out.metrics["reward/overlong_ratio"] == pytest.approx(float(np.mean(penalties < 0)))
    assert out.metrics["reward/overlong_reward"] == pytest.approx(float(np.mean(penalties)))


def test_a_transcripts_tool_tokens_count_toward_its_length_as_in_verl(tokenizer):
    """A multi-turn transcript: the loss mask has 0 on the tool answer between two model turns, verl's attention
    mask 1 on every token through the last model one; the penalty follows the attention mask."""
    prompts, responses, response_mask, attention, texts = tokenized(tokenizer)
    long_rows = [r for r, n in enumerate(response_mask.sum(-1).tolist()) if n >= 8]
    holes = response_mask.clone()
    for r in long_rows:
        holes[r, 2:6] = 0  # tokens 2..5: a tool's answer
    buffer = {"enable": True, "len": 6, "penalty_factor": 1.0, "log": True}
    theirs = verl_dapo(tokenizer, buffer, prompts, responses, attention, len(texts))
    out = rlflow_stage(buffer, holes, texts)
    assert long_rows and np.array_equal(out["token_level_scores"], theirs["reward_tensor"].numpy())
    ours = [e["overlong_reward"] for e in out["reward_extra"]]
    assert ours == [float(v) for v in theirs["reward_extra_info"]["overlong_reward"]]
    by_loss_mask = overlong_penalties(holes.sum(-1).numpy(), OverlongBuffer(**buffer), MAX_RESP)
    assert ours != by_loss_mask.tolist()  # counting the model's tokens only would penalise less


def test_settings_verl_refuses_are_named():
    assert (
        OverlongBuffer(enable=True, len=0).problem(16)
        == "overlong_buffer.len must be positive when the buffer is enabled"
    )
    assert "longer than data.max_response_length 16" in OverlongBuffer(enable=True, len=17).problem(16)
    assert OverlongBuffer(enable=False).problem(16) is None
