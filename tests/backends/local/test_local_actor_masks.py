"""Tool tokens get no loss but are read: the update with a multi-turn mask (0 on tool answers between turns).

Perturbing everything the loss reads at tool positions (advantages, old and reference
log-probs) leaves the update unchanged, bit for bit; perturbing them at one model position, or
changing a tool token's id (which the later model tokens attend to), changes it. Packed and
padded log-prob passes agree on such a mask.
"""

from __future__ import annotations

import copy

import pytest
import torch
from local_helpers import make_pipeline

from rlflow.backends.local.actor import Actor
from rlflow.backends.local.logprob import forward_log_probs
from rlflow.batch import Batch

R = 12
MASK = [1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0]  # model turn, tool answer, model turn, padding
TOOL = torch.tensor(MASK) == 0
TOOL[-1] = False  # the padding column is not a tool token


def transcripts(prompt_batch) -> Batch:
    gen = torch.Generator().manual_seed(0)
    rows = len(prompt_batch)
    batch = Batch({"prompts": prompt_batch["prompts"], "prompt_mask": prompt_batch["prompt_mask"]})
    mask = torch.tensor([MASK] * rows)
    batch["responses"] = torch.randint(10, 1000, (rows, R), generator=gen) * (torch.arange(R) < R - 1)
    batch["response_mask"] = mask
    batch["old_log_probs"] = (-2 + 0.3 * torch.randn(rows, R, generator=gen)) * mask
    batch["ref_log_prob"] = (-2 + 0.3 * torch.randn(rows, R, generator=gen)) * mask
    batch["advantages"] = torch.randn(rows, 1, generator=gen).expand(rows, R) * mask
    return batch


def updated(model, batch: Batch) -> list[torch.Tensor]:
    model = copy.deepcopy(model).train()
    pipeline = make_pipeline(
        algorithm={"use_kl_loss": True, "kl_loss_coef": 0.1, "entropy_coeff": 0.01},
        trainer={"ppo_mini_batch_size": len(batch)},
        data={"max_response_length": R},
    )
    Actor(model, pipeline).update(batch, step=1)
    return [p.detach().clone() for p in model.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def perturbed(batch: Batch, where: torch.Tensor) -> Batch:
    out = Batch({k: batch[k].clone() for k in batch.tensors})
    for name in ("old_log_probs", "ref_log_prob", "advantages"):
        out[name] = out[name].masked_fill(where, 5.0)
    return out


def test_tool_tokens_get_no_loss_but_are_read(sharp_model, prompt_batch):
    batch = transcripts(prompt_batch)
    base = updated(sharp_model, batch)
    assert same(base, updated(sharp_model, perturbed(batch, TOOL.expand(len(batch), R))))
    model_token = torch.zeros(R, dtype=torch.bool)
    model_token[9] = True
    assert not same(base, updated(sharp_model, perturbed(batch, model_token.expand(len(batch), R))))
    other_tool_token = Batch({k: batch[k].clone() for k in batch.tensors})
    other_tool_token["responses"][:, 5] = 7
    assert not same(base, updated(sharp_model, other_tool_token))


@pytest.mark.parametrize("with_entropy", [False, True])
def test_packed_and_padded_log_probs_agree_on_a_holed_mask(sharp_model, prompt_batch, with_entropy):
    batch = transcripts(prompt_batch)
    args = (sharp_model, batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"])
    padded, ent_padded = forward_log_probs(*args, with_entropy=with_entropy)
    packed, ent_packed = forward_log_probs(*args, with_entropy=with_entropy, packed=True)
    mask = batch["response_mask"].bool()
    assert torch.allclose(padded[mask], packed[mask], atol=1e-5)
    if with_entropy:
        assert torch.allclose(ent_padded[mask], ent_packed[mask], atol=1e-4)
