"""The KV-cached sampling loop: agreement with the uncached loop and with HF generate, seeding, EOS."""

from __future__ import annotations

import torch

from rlflow.backends.local.generation import (
    CPU_MAX_NUM_SEQS,
    SamplingParams,
    chunk_seed,
    decode_rows_limit,
    draw,
    processed_logits,
    response_mask_from_tokens,
    sample,
    sample_hf,
    sample_in_chunks,
    sample_with_log_probs,
    shared_prompt_starts,
)
from rlflow.backends.local.logprob import batch_log_probs
from rlflow.batch import Batch


def params(tokenizer, **kw) -> SamplingParams:
    base = dict(max_new_tokens=12, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=tokenizer.pad_token_id)
    return SamplingParams(**{**base, **kw})


def test_greedy_with_and_without_kv_cache_agree(sharp_model, prompt_batch, tokenizer):
    p = params(tokenizer, do_sample=False)
    cached, cached_mask = sample(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    plain, plain_mask = sample(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p, use_cache=False)
    assert torch.equal(cached, plain) and torch.equal(cached_mask, plain_mask)
    assert len({tuple(r) for r in cached.tolist()}) == len(cached)  # not a vacuous agreement
    assert all(len(set(r)) > 3 for r in cached.tolist())


def test_repeated_prompts_share_one_prefill_and_agree_with_the_uncached_loop(sharp_model, prompt_batch, tokenizer):
    rows = prompt_batch.repeat_interleave(3)
    starts = shared_prompt_starts(rows["prompts"], rows["prompt_mask"])
    assert starts.tolist() == [True, False, False] * 3
    assert shared_prompt_starts(prompt_batch["prompts"], prompt_batch["prompt_mask"]) is None
    p = params(tokenizer, do_sample=False)
    shared, shared_mask = sample(sharp_model, rows["prompts"], rows["prompt_mask"], p)
    plain, plain_mask = sample(sharp_model, rows["prompts"], rows["prompt_mask"], p, use_cache=False)
    assert torch.equal(shared, plain) and torch.equal(shared_mask, plain_mask)
    sampled, _ = sample(sharp_model, rows["prompts"], rows["prompt_mask"], params(tokenizer, seed=5))
    assert not torch.equal(sampled[0], sampled[1])  # one prefill, independent samples


def test_torch_loop_agrees_with_hf_generate_when_greedy(sharp_model, prompt_batch, tokenizer):
    p = params(tokenizer, do_sample=False)
    ours, ours_mask = sample(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    hf, hf_mask = sample_hf(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    assert torch.equal(ours, hf) and torch.equal(ours_mask, hf_mask)


def test_sampling_is_seeded_per_call(sharp_model, prompt_batch, tokenizer):
    p = params(tokenizer, temperature=1.0, top_p=0.95, top_k=50, seed=11)
    a, _ = sample(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    torch.rand(5)  # global RNG use in between must not matter
    b, _ = sample(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    c, _ = sample(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer, seed=12))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_top_k_one_and_tiny_top_p_are_greedy(sharp_model, prompt_batch, tokenizer):
    greedy, _ = sample(
        sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer, do_sample=False)
    )
    top_k, _ = sample(
        sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer, top_k=1, seed=3)
    )
    top_p, _ = sample(
        sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer, top_p=1e-6, seed=4)
    )
    assert torch.equal(greedy, top_k) and torch.equal(greedy, top_p)


def test_a_draw_follows_the_distribution():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]])).repeat(20000, 1)
    p = SamplingParams(max_new_tokens=1, eos_token_ids=(0,), pad_token_id=0, seed=0)
    draws = draw(processed_logits(logits, p), p, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=3).float() / len(draws)
    assert torch.allclose(freq, torch.tensor([0.1, 0.6, 0.3]), atol=0.015)
    top_p = SamplingParams(max_new_tokens=1, eos_token_ids=(0,), pad_token_id=0, top_p=0.8)
    kept = draw(processed_logits(logits, top_p), top_p, torch.Generator().manual_seed(0))
    assert set(kept.tolist()) == {1, 2}  # 0.6 + 0.3 reaches 0.8; the 0.1 token is cut


def test_rows_stop_at_eos_and_keep_padding(sharp_model, prompt_batch, tokenizer):
    greedy, _ = sample(
        sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer, do_sample=False)
    )
    # Declare row 0's third greedy token the EOS: row 0 must stop right there, with the EOS kept in its mask.
    eos = int(greedy[0, 2])
    p = params(tokenizer, do_sample=False, eos_token_ids=(eos,))
    out, mask = sample(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    first_eos = (out[0] == eos).nonzero()[0].item()
    assert first_eos <= 2
    assert mask[0].tolist() == [1] * (first_eos + 1) + [0] * (out.shape[1] - first_eos - 1)
    assert (out[0, first_eos + 1 :] == tokenizer.pad_token_id).all()
    for row, row_mask in zip(out.tolist(), mask.tolist()):  # every row: mask = prefix up to its first EOS
        n = row.index(eos) + 1 if eos in row else len(row)
        assert row_mask == [1] * n + [0] * (len(row) - n)


def test_finished_rows_leave_the_decode_batch_and_the_rest_agree_with_hf_generate(sharp_model, prompt_batch, tokenizer):
    rows = prompt_batch.repeat_interleave(2)
    greedy, _ = sample(sharp_model, rows["prompts"], rows["prompt_mask"], params(tokenizer, do_sample=False))
    p = params(tokenizer, do_sample=False, eos_token_ids=(int(greedy[0, 1]), int(greedy[2, 3])))
    widths = []
    hook = sharp_model.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    ours, ours_mask = sample(sharp_model, rows["prompts"], rows["prompt_mask"], p)
    hook.remove()
    hf, hf_mask = sample_hf(sharp_model, rows["prompts"], rows["prompt_mask"], p)
    assert torch.equal(ours, hf) and torch.equal(ours_mask, hf_mask)
    lengths = ours_mask.sum(-1)
    assert lengths.min() < lengths.max() == ours.shape[1]  # rows finish at different steps, some never
    assert widths[1] == len(rows) and widths[-1] < len(rows)  # the decode batch shrank as rows finished
    plain, plain_mask = sample(sharp_model, rows["prompts"], rows["prompt_mask"], p, use_cache=False)
    assert torch.equal(plain, hf) and torch.equal(plain_mask, hf_mask)


def test_eos_as_first_token_gives_an_empty_response_with_a_mask_of_one(sharp_model, prompt_batch, tokenizer):
    greedy, _ = sample(
        sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer, do_sample=False)
    )
    eos = int(greedy[1, 0])
    out, mask = sample(
        sharp_model,
        prompt_batch["prompts"],
        prompt_batch["prompt_mask"],
        params(tokenizer, do_sample=False, eos_token_ids=(eos,)),
    )
    assert out[1, 0] == eos and mask[1].sum() == 1
    hf, hf_mask = sample_hf(
        sharp_model,
        prompt_batch["prompts"],
        prompt_batch["prompt_mask"],
        params(tokenizer, do_sample=False, eos_token_ids=(eos,)),
    )
    assert torch.equal(out, hf) and torch.equal(mask, hf_mask)


def test_response_mask_from_tokens():
    tokens = torch.tensor([[5, 6, 1, 0], [1, 0, 0, 0], [5, 6, 7, 8], [5, 9, 6, 1]])
    assert response_mask_from_tokens(tokens, (1, 9)).tolist() == [
        [1, 1, 1, 0],
        [1, 0, 0, 0],
        [1, 1, 1, 1],
        [1, 1, 0, 0],
    ]


def test_log_probs_as_sampled_equal_the_actors_at_the_rollout_temperature(sharp_model, prompt_batch, tokenizer):
    rows = prompt_batch.repeat_interleave(2)
    p = params(tokenizer, temperature=0.7, seed=3)
    for use_cache in (True, False):
        out, mask, sampled = sample_with_log_probs(
            sharp_model, rows["prompts"], rows["prompt_mask"], p, use_cache=use_cache
        )
        assert torch.equal(out, sample(sharp_model, rows["prompts"], rows["prompt_mask"], p)[0])  # same draws
        batch = Batch({**rows.tensors, "responses": out, "response_mask": mask})
        actor, _ = batch_log_probs(sharp_model, batch, micro_batch_size=None, temperature=0.7, with_entropy=False)
        assert torch.allclose(sampled, actor, atol=1e-4)  # without top-k/top-p the two distributions are one
        assert (sampled[mask == 0] == 0).all() and (sampled[mask == 1] < 0).all()


def test_log_probs_as_sampled_are_under_the_cut_distribution(sharp_model, prompt_batch, tokenizer):
    cut = params(tokenizer, seed=6, top_k=2)
    out, mask, sampled = sample_with_log_probs(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], cut)
    batch = Batch({**prompt_batch.tensors, "responses": out, "response_mask": mask})
    actor, _ = batch_log_probs(sharp_model, batch, micro_batch_size=None, temperature=1.0, with_entropy=False)
    on = mask == 1
    assert (sampled[on] >= actor[on] - 1e-5).all()  # renormalised over the two best tokens: never less likely
    assert (sampled[on] > actor[on] + 1e-3).any()


def test_chunked_greedy_decoding_agrees_with_one_call_and_trims_shared_padding(sharp_model, prompt_batch, tokenizer):
    rows = prompt_batch.repeat_interleave(2)
    p = params(tokenizer, do_sample=False)
    whole = sample_with_log_probs(sharp_model, rows["prompts"], rows["prompt_mask"], p)
    widths = []

    def sampler(prompts, mask, sp):
        widths.append(prompts.shape[1])
        assert bool(mask[:, 0].any()), "a column no prompt of the chunk uses was kept"
        return sample_with_log_probs(sharp_model, prompts, mask, sp)

    chunked = sample_in_chunks(sampler, rows["prompts"], rows["prompt_mask"], p, max_rows=4)
    assert len(widths) == -(-len(rows) // 4) and min(widths) < rows["prompts"].shape[1]
    assert torch.equal(whole[0], chunked[0]) and torch.equal(whole[1], chunked[1])
    assert torch.allclose(whole[2], chunked[2], atol=1e-5)


def test_each_chunk_samples_from_its_own_seed(sharp_model, prompt_batch, tokenizer):
    first = prompt_batch["prompts"][:1].repeat(8, 1), prompt_batch["prompt_mask"][:1].repeat(8, 1)
    p = params(tokenizer, seed=7)
    seeds = []

    def sampler(prompts, mask, sp):
        seeds.append(sp.seed)
        return sample_with_log_probs(sharp_model, prompts, mask, sp)

    responses, _, _ = sample_in_chunks(sampler, *first, p, max_rows=4)
    assert seeds == [7, chunk_seed(7, 1)] and len(set(seeds)) == 2
    assert not torch.equal(responses[:4], responses[4:])  # same prompt, same shape: only the seed differs
    one, _, _ = sample_in_chunks(sampler, *first, p, max_rows=None)
    again, _, _ = sample_in_chunks(sampler, *first, p, max_rows=8)
    assert torch.equal(one, again)  # a batch that fits in one chunk samples as an unchunked call


def test_decode_rows_limit_caps_a_cpu_and_follows_max_num_seqs():
    assert decode_rows_limit(None, torch.device("cpu")) == CPU_MAX_NUM_SEQS
    assert decode_rows_limit(None, torch.device("cuda")) is None
    assert decode_rows_limit(16, torch.device("cuda")) == 16 and decode_rows_limit(256, torch.device("cpu")) == 256
