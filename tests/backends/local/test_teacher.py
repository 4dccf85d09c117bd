"""The teachers of on-policy distillation (rlflow.backends.local.teacher) and the actor's distillation term.

Teachers give the sampled token's log-prob (K=1) or their top-k log-probs and ids at temperature 1, route rows
by data_source and refuse a teacher whose vocabulary differs from the student's; the actor's update with
distillation moves the student toward the teacher.
"""

from __future__ import annotations

import copy

import pytest
import torch
from local_helpers import make_pipeline, sharpen

from rlflow.backends.local.actor import Actor
from rlflow.backends.local.generation import SamplingParams, sample
from rlflow.backends.local.logprob import batch_log_probs, forward_log_probs
from rlflow.backends.local.teacher import Teachers
from rlflow.batch import Batch
from rlflow.errors import BackendError
from rlflow.schemas.distillation import DistillationSpec

K = 5


def with_distillation(pipeline, **loss):
    teachers = loss.pop("teachers", {"teacher": {"model_path": "builtin:tiny-qwen2"}})
    spec = DistillationSpec.model_validate(
        {"enabled": True, "teacher_models": teachers, "distillation_loss": {"topk": K, **loss}}
    )
    return pipeline.model_copy(update={"distillation": spec})


def rollout(model, prompt_batch, tokenizer, seed: int = 3) -> Batch:
    rows = prompt_batch.repeat_interleave(2)
    p = SamplingParams(
        max_new_tokens=8, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=tokenizer.pad_token_id, seed=seed
    )
    responses, mask = sample(model, rows["prompts"], rows["prompt_mask"], p)
    rows.update(Batch({"responses": responses, "response_mask": mask}))
    return rows


def response_logits(model, batch: Batch) -> torch.Tensor:
    """Logits [B, R, V] of each response position, from one plain forward (no trimming, no shared prompts)."""
    ids = torch.cat([batch["prompts"], batch["responses"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["response_mask"]], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    return logits[:, batch["prompts"].shape[1] - 1 : -1].float()


@pytest.fixture
def teachers(tokenizer):
    return Teachers(with_distillation(make_pipeline()), tokenizer)


def test_k1_is_the_sampled_tokens_log_prob_at_temperature_1(teachers, sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    teacher = teachers.models["teacher"] = sharpen(teachers.models["teacher"], seed=7)
    out = teachers.log_probs(batch, {"teachers": ["teacher"] * len(batch), "topk": 0, "micro_batch_size": 4})
    expected, _ = forward_log_probs(
        teacher, batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"], temperature=1.0
    )
    mask = batch["response_mask"].bool()
    assert set(out) == {"teacher_logprobs"} and out["teacher_logprobs"].shape == (*mask.shape, 1)
    # micro-batches of 4 rows against one forward of all: other matmul shapes, float rounding only
    torch.testing.assert_close(out["teacher_logprobs"][..., 0], expected * mask, rtol=1e-5, atol=1e-5)
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())


def test_topk_is_torch_topk_of_log_softmax(teachers, sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    teacher = teachers.models["teacher"] = sharpen(teachers.models["teacher"], seed=7)
    out = teachers.log_probs(batch, {"teachers": ["teacher"] * len(batch), "topk": K, "micro_batch_size": None})
    top = response_logits(teacher, batch).log_softmax(-1).topk(K, dim=-1)
    mask = batch["response_mask"].bool()[..., None]
    assert out["teacher_ids"].dtype == torch.int64 and out["teacher_ids"].shape == (*mask.shape[:2], K)
    torch.testing.assert_close(out["teacher_logprobs"], top.values * mask, rtol=1e-5, atol=1e-5)
    assert torch.equal(out["teacher_ids"], top.indices * mask)


def test_rows_go_to_the_teacher_of_their_data_source(tokenizer, sharp_model, prompt_batch):
    teacher_models = {
        "math": {"key": "math", "model_path": "builtin:tiny-qwen2"},
        "code": {"key": "code", "model_path": "builtin:tiny-qwen2"},
    }
    pipeline = with_distillation(make_pipeline(), teachers=teacher_models, loss_mode="k3")
    two = Teachers(pipeline, tokenizer)
    two.models["code"] = sharpen(two.models["code"], seed=9)
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    sources = ["math", "code"] * (len(batch) // 2)
    names = [pipeline.distillation.teacher_for(s) for s in sources]
    out = two.log_probs(batch, {"teachers": names, "topk": 0, "micro_batch_size": 1})["teacher_logprobs"][..., 0]
    for name in ("math", "code"):
        rows = [i for i, n in enumerate(names) if n == name]
        alone, _ = batch_log_probs(
            two.models[name], batch.index(rows), micro_batch_size=1, temperature=1.0, with_entropy=False
        )
        torch.testing.assert_close(out[rows], alone * batch.index(rows)["response_mask"], rtol=0, atol=1e-6)
    assert not torch.allclose(out[0::2], out[1::2])  # the two teachers differ


def test_a_teacher_with_another_vocabulary_is_refused(tokenizer, tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=640, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1,
    )  # fmt: skip
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "other")
    pipeline = with_distillation(make_pipeline(), teachers={"big": {"model_path": str(tmp_path / "other")}})
    with pytest.raises(BackendError, match=r"teacher_models\.big: .* predicts 640 tokens .* shared vocabulary"):
        Teachers(pipeline, tokenizer)


# ---- the actor's distillation term ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("loss", "reported"),
    [
        ({"loss_mode": "k3", "use_task_rewards": False}, "distillation/abs_loss"),
        ({"loss_mode": "forward_kl_topk", "use_task_rewards": False}, "distillation/teacher_mass"),
        ({"loss_mode": "k1", "use_policy_gradient": True, "distillation_loss_coef": 0.5}, "distillation/ppo_kl"),
    ],
)
def test_updates_move_the_student_toward_the_teacher(loss, reported, sharp_model, prompt_batch, tokenizer):
    pipeline = with_distillation(make_pipeline(trainer={"ppo_mini_batch_size": 3, "optim": {"lr": 3e-4}}), **loss)
    teachers = Teachers(pipeline, tokenizer)
    teachers.models["teacher"] = sharpen(copy.deepcopy(teachers.models["teacher"]), seed=7)
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    params = {
        "teachers": ["teacher"] * len(batch),
        "topk": K if loss["loss_mode"] == "forward_kl_topk" else 0,
        "micro_batch_size": None,
    }
    batch.update(Batch(teachers.log_probs(batch, params)))
    mask = batch["response_mask"].bool()
    teacher_lp, _ = batch_log_probs(
        teachers.models["teacher"], batch, micro_batch_size=None, temperature=1.0, with_entropy=False
    )
    actor = Actor(sharp_model, pipeline)
    gaps, history = [], []
    for step in range(4):
        student, _ = batch_log_probs(sharp_model, batch, micro_batch_size=None, temperature=1.0, with_entropy=False)
        gaps.append(float((student - teacher_lp)[mask].abs().mean()))
        batch["old_log_probs"] = student
        batch["advantages"] = torch.zeros_like(student)  # no task reward: only the teacher moves the student
        history.append(actor.update(batch, step=step + 1))
    assert gaps[-1] < gaps[0]
    for key in ("distillation/loss", "distillation/loss_min", "distillation/loss_max", reported):
        assert key in history[0], key
    assert history[-1]["distillation/loss"] < history[0]["distillation/loss"] or reported == "distillation/ppo_kl"
    if not loss.get("use_task_rewards", True) and not loss.get("use_policy_gradient"):
        assert history[0]["actor/pg_loss"] == 0.0  # verl computes no policy loss then


def test_student_topk_is_the_same_packed_or_padded(sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    mask = batch["response_mask"].bool()
    ids = torch.randint(0, 1000, (*mask.shape, K), generator=torch.Generator().manual_seed(0))
    fields = (batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"])
    _, _, padded = forward_log_probs(sharp_model, *fields, topk_ids=ids)
    _, _, packed = forward_log_probs(sharp_model, *fields, topk_ids=ids, packed=True)
    logits = response_logits(sharp_model, batch).log_softmax(-1)
    torch.testing.assert_close(padded.log_probs[mask], logits.gather(-1, ids)[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed.log_probs[mask], padded.log_probs[mask], rtol=1e-5, atol=1e-5)
    assert torch.equal(packed.ids[mask], padded.ids[mask])
    assert torch.equal(padded.ids[mask], logits.topk(K, dim=-1).indices[mask])
