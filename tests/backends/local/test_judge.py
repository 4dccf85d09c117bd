"""``Judge``: a frozen causal LM's verdicts: chat template, left truncation, greedy determinism, micro-batches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from judge_helpers import save_tiny_judge

from rlflow.backends.local.judge import Judge
from rlflow.errors import BackendError
from rlflow.schemas.reward_model import RewardModelSpec

CHATS = [
    [{"role": "user", "content": "Question: Which number is the largest: 1, 2, 3?\nAnswer: #### 3\nRight? yes or no."}],
    [{"role": "user", "content": "Is this right?"}],
    [{"role": "user", "content": "Answer: " + "long " * 200}],
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_judge(tmp_path_factory.mktemp("judge") / "m")


def pipeline(model_path, **spec):
    return SimpleNamespace(
        reward_model=RewardModelSpec(model_path=str(model_path), **spec),
        model=SimpleNamespace(dtype="float32"),
        trainer=SimpleNamespace(seed=0),
    )


@pytest.fixture(scope="module")
def judge(model_dir):
    return Judge(pipeline(model_dir, rollout={"response_length": 6, "prompt_length": 64}))


def test_greedy_verdicts_are_deterministic_and_do_not_depend_on_micro_batches(judge):
    first = judge.verdicts(CHATS, {})
    assert len(first) == 3 and all(isinstance(v, str) for v in first)
    assert judge.verdicts(CHATS, {}) == first
    assert judge.verdicts(CHATS, {"micro_batch_size": 1}) == first
    assert judge.verdicts(CHATS[1:2], {}) == first[1:2]  # a row's verdict does not depend on its neighbours


def test_sampled_verdicts_follow_the_seed(judge):
    params = {"temperature": 1.0, "seed": 5}
    assert judge.verdicts(CHATS * 2, params) == judge.verdicts(CHATS * 2, params)


def test_prompts_keep_their_last_prompt_length_tokens_with_the_generation_prompt(judge):
    full = judge.prompt_ids(CHATS, 10_000)
    cut = judge.prompt_ids(CHATS, 12)
    assert [len(r) for r in cut] == [min(len(r), 12) for r in full]
    assert all(c == f[-12:] for c, f in zip(cut, full, strict=True))
    generation_prompt = judge.tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert cut[2][-len(generation_prompt) :] == generation_prompt
    assert len(full[2]) > 64  # the long chat is cut by rollout.prompt_length when judged
    assert len(judge.verdicts(CHATS[2:], {})) == 1


def test_verdicts_are_at_most_response_length_tokens(judge):
    for verdict in judge.verdicts(CHATS, {"response_length": 2}):
        assert len(judge.tokenizer(verdict, add_special_tokens=False)["input_ids"]) <= 2 * 2  # decode may re-split


def test_the_judge_is_frozen_and_judging_leaves_its_weights_alone(judge):
    assert not judge.model.training
    assert all(not p.requires_grad for p in judge.model.parameters())
    before = {k: v.clone() for k, v in judge.model.state_dict().items()}
    judge.verdicts(CHATS, {"temperature": 1.0})
    assert all(torch.equal(before[k], v) for k, v in judge.model.state_dict().items())


def test_the_judge_takes_its_dtype_from_the_reward_model_block(model_dir):
    assert next(Judge(pipeline(model_dir, dtype="bfloat16")).model.parameters()).dtype == torch.bfloat16


def test_an_engine_holding_the_judge_never_takes_policy_weights(model_dir):
    from rlflow.backends.local.local_engine import LocalEngine
    from rlflow.schemas.pipeline import Pipeline

    spec = {
        "name": "j",
        "data": {"train": "x.json"},
        "reward_model": {"model_path": str(model_dir)},
        "resources": {"pool": {"type": "local", "device": "cpu"}},
        "stages": [],
    }
    engine = LocalEngine(Pipeline.model_validate(spec), roles=frozenset({"judge"}))
    with pytest.raises(BackendError, match="rollout"):
        engine.load_rollout_weights({}, 1)


def test_a_judge_needs_a_model_path():
    with pytest.raises(BackendError, match="model_path"):
        Judge(pipeline("x").__class__(reward_model=RewardModelSpec(), model=None, trainer=None))
