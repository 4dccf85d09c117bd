"""``RewardModel`` (the ``reward_model`` role, verl's disrm) on a tiny classifier made here: the score at the
last token as a plain transformers forward gives it, micro-batching and ``max_length``, no gradient, errors."""

from __future__ import annotations

import pytest
import torch
from local_helpers import make_pipeline

from rlflow.backends.local.reward_model import RewardModel
from rlflow.errors import BackendError
from rlflow.schemas.reward_model import RewardModelSpec

PROMPTS = ["<|im_start|>user\nWhich number is the largest: 4, 9, 3?<|im_end|>\n<|im_start|>assistant\n"] * 2 + [
    "How many singers are there?",
    "SELECT",
]
RESPONSES = ["#### 9", "#### 4 and then some more text", "SELECT count(*) FROM singer", ""]


def tiny_config(tokenizer, **extra):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=-(-len(tokenizer) // 64) * 64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **extra,
    )


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory, tokenizer):
    """A tiny Qwen2ForSequenceClassification (num_labels=1, random weights) with the built-in tokenizer."""
    from transformers import Qwen2ForSequenceClassification

    torch.manual_seed(0)
    model = Qwen2ForSequenceClassification(tiny_config(tokenizer, num_labels=1))
    with torch.no_grad():
        model.score.weight.normal_(0.0, 1.0)  # scores far from 0 and far apart: a wrong token shows
    out = tmp_path_factory.mktemp("rm")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def pipeline_with(path, **rm):
    return make_pipeline().model_copy(update={"reward_model": RewardModelSpec(model_path=str(path), **rm)})


@pytest.fixture(scope="module")
def scorer(classifier_dir):
    return RewardModel(pipeline_with(classifier_dir))


def plain_scores(scorer, prompts, responses, max_length=None):
    """One row at a time, no padding: a plain transformers forward, read at the last token."""
    out = []
    for prompt, response in zip(prompts, responses, strict=True):
        ids = scorer.tokenizer(prompt + response, add_special_tokens=False)["input_ids"]
        ids = ids[-max_length:] if max_length else ids
        with torch.no_grad():
            out.append(float(scorer.model(input_ids=torch.tensor([ids])).logits[0, 0]))
    return torch.tensor(out)


def test_scores_are_the_classifier_at_the_last_token(scorer):
    scores = scorer.score(PROMPTS, RESPONSES, {"micro_batch_size": None})
    assert scores.shape == (4,) and scores.dtype == torch.float32
    assert torch.allclose(scores, plain_scores(scorer, PROMPTS, RESPONSES), atol=1e-5)
    assert scores.std() > 0.1, "distinct rows score apart"


def test_micro_batches_do_not_change_the_scores(scorer):
    whole = scorer.score(PROMPTS, RESPONSES, {"micro_batch_size": None})
    for size in (1, 3):
        assert torch.allclose(scorer.score(PROMPTS, RESPONSES, {"micro_batch_size": size}), whole, atol=1e-5)
    assert scorer.score([], [], {}).shape == (0,)


def test_max_length_keeps_the_tail(scorer):
    cut = scorer.score(PROMPTS, RESPONSES, {"max_length": 5})
    assert torch.allclose(cut, plain_scores(scorer, PROMPTS, RESPONSES, max_length=5), atol=1e-5)
    assert not torch.allclose(cut, scorer.score(PROMPTS, RESPONSES, {}), atol=1e-3)


def test_no_gradient_and_the_declared_dtype(classifier_dir, scorer):
    assert not scorer.model.training and not any(p.requires_grad for p in scorer.model.parameters())
    assert not scorer.score(PROMPTS, RESPONSES, {}).requires_grad
    half = RewardModel(pipeline_with(classifier_dir, dtype="bfloat16"))
    assert next(half.model.parameters()).dtype == torch.bfloat16
    assert half.score(PROMPTS, RESPONSES, {}).dtype == torch.float32


def test_a_missing_directory_names_reward_model_model_path(tmp_path):
    with pytest.raises(BackendError, match=r"reward_model\.model_path: .*nowhere does not exist"):
        RewardModel(pipeline_with(tmp_path / "nowhere"))
    with pytest.raises(BackendError, match=r"reward_model\.model_path is not set"):
        RewardModel(make_pipeline())


def test_a_causal_lm_or_a_two_label_classifier_is_refused(tmp_path, tokenizer):
    from transformers import Qwen2ForCausalLM, Qwen2ForSequenceClassification

    Qwen2ForCausalLM(tiny_config(tokenizer)).save_pretrained(tmp_path / "lm")
    with pytest.raises(BackendError, match=r"reward_model\.model_path: .*Qwen2ForCausalLM.*num_labels=1"):
        RewardModel(pipeline_with(tmp_path / "lm"))
    Qwen2ForSequenceClassification(tiny_config(tokenizer, num_labels=2)).save_pretrained(tmp_path / "two")
    with pytest.raises(BackendError, match=r"2 label\(s\); rm_score needs a sequence classifier with num_labels=1"):
        RewardModel(pipeline_with(tmp_path / "two"))
