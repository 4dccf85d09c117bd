"""Response log-probs and entropy: equal to a direct full-sequence computation, padding-invariant,
and the same (values and gradients) when the n samples of a prompt share one prompt encoding or when
the rows are packed into one sequence without padding."""

from __future__ import annotations

import pytest
import torch

from rlflow.backends.local.generation import SamplingParams, sample
from rlflow.backends.local.logprob import batch_log_probs, forward_log_probs, token_log_probs, trim_padding
from rlflow.batch import Batch


def rollout(model, prompt_batch, tokenizer, steps: int = 8) -> Batch:
    p = SamplingParams(
        max_new_tokens=steps, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=tokenizer.pad_token_id, seed=2
    )
    responses, mask = sample(model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    return Batch({**prompt_batch.tensors, "responses": responses, "response_mask": mask})


def direct_log_probs(model, batch: Batch, i: int, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``i``'s response log-probs and entropy from one forward of its unpadded tokens."""
    prompt = batch["prompts"][i][batch["prompt_mask"][i].bool()]
    n = int(batch["response_mask"][i].sum())
    ids = torch.cat([prompt, batch["responses"][i, :n]])[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    log_probs = torch.log_softmax(logits, -1)
    return log_probs.gather(-1, ids[0, len(prompt) :, None]).squeeze(-1), -(log_probs.exp() * log_probs).sum(-1)


def test_log_probs_equal_a_direct_unpadded_forward(sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    lp, ent = batch_log_probs(sharp_model, batch, micro_batch_size=None, temperature=0.7, with_entropy=True)
    for i in range(len(batch)):
        n = int(batch["response_mask"][i].sum())
        expected, expected_entropy = direct_log_probs(sharp_model, batch, i, 0.7)
        assert torch.allclose(lp[i, :n], expected, atol=1e-4), i
        assert torch.allclose(ent[i, :n], expected_entropy, atol=1e-4), i


def test_samples_of_one_prompt_share_its_encoding_and_match_a_direct_forward(sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch.repeat_interleave(3), tokenizer)
    embedded_rows = []
    hook = sharp_model.model.embed_tokens.register_forward_hook(
        lambda _m, args, _out: embedded_rows.append(args[0].shape)
    )
    try:
        lp, ent = batch_log_probs(sharp_model, batch, micro_batch_size=None, temperature=0.7, with_entropy=True)
    finally:
        hook.remove()
    assert embedded_rows[0][0] == len(prompt_batch)  # one prompt encoding per group of samples
    assert embedded_rows[1][0] == len(batch)  # then the responses of every row
    for i in range(len(batch)):
        n = int(batch["response_mask"][i].sum())
        expected, expected_entropy = direct_log_probs(sharp_model, batch, i, 0.7)
        assert torch.allclose(lp[i, :n], expected, atol=1e-4), i
        assert torch.allclose(ent[i, :n], expected_entropy, atol=1e-4), i


def test_a_shared_prompt_encoding_gives_the_gradients_of_separate_forwards(sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch.repeat_interleave(3), tokenizer)
    weights = torch.linspace(0.5, 1.5, batch["responses"].numel()).reshape(batch["responses"].shape)

    def gradients(micro: int) -> list[torch.Tensor]:
        sharp_model.zero_grad(set_to_none=True)
        for part, w in zip(batch.chunks(micro), weights.split(micro)):
            lp, _ = forward_log_probs(
                sharp_model, part["prompts"], part["prompt_mask"], part["responses"], part["response_mask"]
            )
            (lp * w * part["response_mask"]).sum().backward()
        return [p.grad.clone() for p in sharp_model.parameters()]

    shared, separate = gradients(len(batch)), gradients(1)  # one row per forward: nothing to share
    for a, b in zip(shared, separate):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-3)
    sharp_model.gradient_checkpointing_enable()  # the cache is off in training then: one joint forward
    sharp_model.train()
    for a, b in zip(gradients(len(batch)), separate):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-3)


def test_micro_batching_does_not_change_the_result(sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    whole, _ = batch_log_probs(sharp_model, batch, micro_batch_size=None, temperature=1.0, with_entropy=False)
    parts, _ = batch_log_probs(sharp_model, batch, micro_batch_size=1, temperature=1.0, with_entropy=False)
    mask = batch["response_mask"].bool()
    assert torch.allclose(whole[mask], parts[mask], atol=1e-5)


def test_rows_with_an_empty_mask_stay_finite(sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    batch["response_mask"] = torch.zeros_like(batch["response_mask"])
    lp, ent = batch_log_probs(sharp_model, batch, micro_batch_size=2, temperature=1.0, with_entropy=True)
    assert lp.shape == batch["responses"].shape and torch.isfinite(lp).all() and torch.isfinite(ent).all()


def test_forward_log_probs_carries_gradients(sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    lp, _ = forward_log_probs(
        sharp_model, batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"]
    )
    (lp * batch["response_mask"]).sum().backward()
    assert sharp_model.model.embed_tokens.weight.grad is not None


def test_trim_padding_drops_only_the_columns_every_row_masks():
    prompts = torch.tensor([[0, 0, 5, 6], [0, 0, 0, 7]])
    prompt_mask = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 1]])
    responses = torch.tensor([[8, 1, 0, 0], [9, 9, 1, 0]])
    response_mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    p, pm, r, rm = trim_padding(prompts, prompt_mask, responses, response_mask)
    assert p.tolist() == [[5, 6], [0, 7]] and pm.tolist() == [[1, 1], [0, 1]]
    assert r.tolist() == [[8, 1, 0], [9, 9, 1]] and rm.tolist() == [[1, 1, 0], [1, 1, 1]]


def test_extra_padding_columns_do_not_change_log_probs(sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch, tokenizer)
    lp, ent = forward_log_probs(
        sharp_model,
        batch["prompts"],
        batch["prompt_mask"],
        batch["responses"],
        batch["response_mask"],
        with_entropy=True,
    )
    rows, pad = len(batch), tokenizer.pad_token_id
    wide = [
        torch.cat([torch.full((rows, 5), pad), batch["prompts"]], 1),
        torch.cat([torch.zeros((rows, 5), dtype=torch.long), batch["prompt_mask"]], 1),
        torch.cat([batch["responses"], torch.full((rows, 6), pad)], 1),
        torch.cat([batch["response_mask"], torch.zeros((rows, 6), dtype=torch.long)], 1),
    ]
    wide_lp, wide_ent = forward_log_probs(sharp_model, *wide, with_entropy=True)
    width = batch["responses"].shape[1]
    assert wide_lp.shape == (rows, width + 6) and (wide_lp[:, width:] == 0).all()
    mask = batch["response_mask"].bool()
    with torch.no_grad():
        assert torch.allclose(wide_lp[:, :width][mask], lp[mask], atol=1e-5)
        assert torch.allclose(wide_ent[:, :width][mask], ent[mask], atol=1e-5)


def test_packed_log_probs_and_gradients_equal_padded_ones(sharp_model, prompt_batch, tokenizer):
    """In float64, so that the comparison is of the math (per-row attention vs a masked batch), not of rounding."""
    batch = rollout(sharp_model, prompt_batch.repeat_interleave(2), tokenizer)
    sharp_model.double()
    assert (batch["response_mask"].sum(-1) < batch["responses"].shape[1]).any()  # some rows end early
    mask = batch["response_mask"].bool()
    weights = torch.linspace(0.5, 1.5, batch["responses"].numel()).reshape(batch["responses"].shape)

    def run(packed: bool):
        sharp_model.zero_grad(set_to_none=True)
        lp, ent = forward_log_probs(
            sharp_model,
            *(batch[k] for k in ("prompts", "prompt_mask", "responses", "response_mask")),
            temperature=0.7,
            with_entropy=True,
            packed=packed,
        )
        (lp * weights * mask).sum().backward()
        return lp.detach(), ent.detach(), [p.grad.clone() for p in sharp_model.parameters()]

    (lp, ent, grads), (plp, pent, pgrads) = run(False), run(True)
    assert plp.shape == lp.shape and torch.allclose(plp[mask], lp[mask], atol=1e-10)
    assert torch.allclose(pent[mask], ent[mask], atol=1e-10)
    assert (plp[~mask] == 0).all()
    for a, b in zip(pgrads, grads):  # the padded side's shared-prefix encoding rounds at ~1e-7 of the scale
        assert torch.allclose(a, b, atol=1e-6 * float(b.abs().max()), rtol=0)


def test_a_packed_pass_of_a_checkpointing_model_back_propagates_as_without_checkpointing(
    sharp_model, prompt_batch, tokenizer
):
    """The backward recomputes each layer after the forward's attention block ended: it must run the same attention."""
    batch = rollout(sharp_model, prompt_batch.repeat_interleave(2), tokenizer)
    sharp_model.double().train()
    mask = batch["response_mask"].bool()

    def grads():
        sharp_model.zero_grad(set_to_none=True)
        lp, _ = forward_log_probs(
            sharp_model, *(batch[k] for k in ("prompts", "prompt_mask", "responses", "response_mask")), packed=True
        )
        (lp * mask).sum().backward()
        return [p.grad.clone() for p in sharp_model.parameters()]

    plain = grads()
    sharp_model.gradient_checkpointing_enable()
    try:
        checkpointed = grads()
    finally:
        sharp_model.gradient_checkpointing_disable()
        sharp_model.config._attn_implementation = "sdpa"
    for a, b in zip(checkpointed, plain):
        assert torch.allclose(a, b, atol=1e-9 * float(b.abs().max()), rtol=0)


def test_packed_passes_build_no_attention_mask(sharp_model, prompt_batch, tokenizer, monkeypatch):
    """The rows' offsets reach the attention: transformers' mask builders (a dense [T, T] mask for sdpa) never run."""
    import transformers.models.qwen2.modeling_qwen2 as qwen2

    batch = rollout(sharp_model, prompt_batch.repeat_interleave(2), tokenizer)
    expected, _ = batch_log_probs(sharp_model, batch, micro_batch_size=None, temperature=1.0, with_entropy=False)

    def refuse(*args, **kwargs):
        raise AssertionError("a mask was built for a packed pass")

    monkeypatch.setattr(qwen2, "create_causal_mask", refuse)
    packed, _ = batch_log_probs(
        sharp_model, batch, micro_batch_size=None, temperature=1.0, with_entropy=False, packed=True
    )
    mask = batch["response_mask"].bool()
    assert torch.allclose(packed[mask], expected[mask], atol=1e-4)
    assert sharp_model.config._attn_implementation == "sdpa"  # switched back after the pass


@pytest.mark.parametrize("chunk_elements", [1 << 26, 100])
def test_token_log_probs_equal_verls_functions(chunk_elements):
    """The chunked log-softmax-gather and entropy equal verl's ``logprobs_from_logits`` and ``entropy_from_logits``."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn((3, 7, 50), generator=generator) * 4
    labels = torch.randint(0, 50, (3, 7), generator=generator)
    lp, ent = token_log_probs(logits, labels, temperature=0.7, with_entropy=True, chunk_elements=chunk_elements)
    scaled = logits / 0.7
    assert lp.dtype == torch.float32 and lp.shape == labels.shape
    assert torch.allclose(lp, logprobs_from_logits(scaled, labels), atol=1e-6)
    assert torch.allclose(ent, entropy_from_logits(scaled), atol=1e-5)
    bf16 = logits.bfloat16()  # bf16 logits are read in float32 (verl's callers cast them first too)
    assert torch.allclose(token_log_probs(bf16, labels)[0], logprobs_from_logits(bf16.float(), labels), atol=1e-6)


def test_token_log_probs_carry_gradients_like_verls():
    from verl.utils.torch_functional import logprobs_from_logits

    logits = torch.randn((4, 9, 30), generator=torch.Generator().manual_seed(1)).requires_grad_(True)
    labels = torch.randint(0, 30, (4, 9))
    (token_log_probs(logits, labels, chunk_elements=60)[0] * torch.arange(36.0).view(4, 9)).sum().backward()
    ours, logits.grad = logits.grad, None
    (logprobs_from_logits(logits, labels) * torch.arange(36.0).view(4, 9)).sum().backward()
    assert torch.allclose(ours, logits.grad, atol=1e-6)


@pytest.mark.gpu
def test_packed_log_probs_equal_padded_ones_in_bf16_on_cuda(sharp_model, prompt_batch, tokenizer):
    batch = rollout(sharp_model, prompt_batch.repeat_interleave(2), tokenizer)
    model = sharp_model.to(device="cuda", dtype=torch.bfloat16)
    padded, _ = batch_log_probs(model, batch, micro_batch_size=None, temperature=1.0, with_entropy=False)
    packed, _ = batch_log_probs(model, batch, micro_batch_size=None, temperature=1.0, with_entropy=False, packed=True)
    mask = batch["response_mask"].bool()
    assert torch.allclose(packed[mask], padded[mask], atol=0.1, rtol=0.05)  # bf16: 8-bit mantissa
    assert (packed[mask] - padded[mask]).abs().mean() < 0.02
