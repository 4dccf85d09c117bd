"""The static-cache decode loop: agreement with today's loop and HF generate, seeding, EOS handling, CUDA graphs,
attention without repeated KV heads, and decoders reused across calls per shape bucket.

The step function a CUDA graph captures runs eagerly on the CPU, so the CPU tests cover every
op of it (and the bucket cache, which keeps decoders with or without a graph); the ``gpu`` tests
(opt-in: ``RLFLOW_TEST_GPU=1`` on a CUDA machine) cover the capture and the replay.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses

import pytest
import torch

from rlflow.backends.local import static_decode
from rlflow.backends.local.generation import SamplingParams, sample_hf, sample_with_log_probs
from rlflow.backends.local.static_decode import (
    BATCH_QUANTUM,
    DecodeGraphs,
    bucket,
    sample_static,
    static_decode_supported,
    use_static_decode,
)


def params(tokenizer, **kw) -> SamplingParams:
    base = dict(max_new_tokens=12, eos_token_ids=(tokenizer.eos_token_id,), pad_token_id=tokenizer.pad_token_id)
    return SamplingParams(**{**base, **kw})


def eos_at_different_steps(model, rows, tokenizer) -> SamplingParams:
    """Greedy params whose EOS ids are tokens rows 0 and 2 reach at steps 1 and 3 (row 0's may recur elsewhere)."""
    greedy, _, _ = sample_with_log_probs(
        model, rows["prompts"], rows["prompt_mask"], params(tokenizer, do_sample=False)
    )
    return params(tokenizer, do_sample=False, eos_token_ids=(int(greedy[0, 1]), int(greedy[2, 3])))


def test_greedy_equals_todays_loop_and_hf_generate(sharp_model, prompt_batch, tokenizer):
    assert len(set(prompt_batch["prompt_mask"].sum(-1).tolist())) == len(prompt_batch)  # left-padded, all lengths
    for rows in (prompt_batch, prompt_batch.repeat_interleave(2)):  # without and with a shared prefill
        p = eos_at_different_steps(sharp_model, rows, tokenizer)
        ours, ours_mask, ours_lp = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], p)
        today, today_mask, today_lp = sample_with_log_probs(sharp_model, rows["prompts"], rows["prompt_mask"], p)
        hf, hf_mask = sample_hf(sharp_model, rows["prompts"], rows["prompt_mask"], p)
        assert torch.equal(ours, today) and torch.equal(ours_mask, today_mask)
        assert torch.equal(ours, hf) and torch.equal(ours_mask, hf_mask)
        assert torch.allclose(ours_lp, today_lp, atol=1e-4)
        lengths = ours_mask.sum(-1)
        assert lengths.min() < lengths.max() == ours.shape[1]  # rows finish at different steps, some never
        assert len({tuple(r) for r in ours.tolist()}) == len(prompt_batch)  # not a vacuous agreement


def test_checking_for_the_end_every_k_steps_changes_nothing(sharp_model, prompt_batch, tokenizer):
    p = eos_at_different_steps(sharp_model, prompt_batch, tokenizer)
    each = sample_static(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p, check_every=1)
    every_16 = sample_static(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p, check_every=16)
    assert all(torch.equal(a, b) for a, b in zip(each, every_16))


def test_finished_rows_get_pad_after_eos_and_the_batch_keeps_its_width(sharp_model, prompt_batch, tokenizer):
    rows = prompt_batch.repeat_interleave(2)
    p = eos_at_different_steps(sharp_model, rows, tokenizer)
    widths = []
    hook = sharp_model.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    out, mask, log_probs = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], p)
    hook.remove()
    assert widths[0] == (len(rows) // 2, rows["prompts"].shape[1])  # one prefill per distinct prompt
    assert set(widths[1:]) == {(bucket(len(rows), BATCH_QUANTUM), 1)}  # every step: all rows (a bucket), one token
    for row, row_mask, row_lp in zip(out.tolist(), mask.tolist(), log_probs):
        n = next((i + 1 for i, tok in enumerate(row) if tok in p.eos_token_ids), len(row))
        assert row_mask == [1] * n + [0] * (len(row) - n)
        assert row[n:] == [tokenizer.pad_token_id] * (len(row) - n)
        assert (row_lp[:n] < 0).all() and (row_lp[n:] == 0).all()
    assert mask.sum(-1).min() <= 2


def test_all_rows_done_stops_the_loop(sharp_model, prompt_batch, tokenizer):
    greedy, _, _ = sample_static(
        sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer, do_sample=False)
    )
    p = params(tokenizer, do_sample=False, eos_token_ids=tuple(int(t) for t in greedy[:, 0]))
    calls = []
    hook = sharp_model.register_forward_pre_hook(lambda *_: calls.append(1))
    out, mask, _ = sample_static(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    hook.remove()
    assert len(calls) == 1  # the prefill only: every row's first token is an EOS
    assert mask.sum(-1).tolist() == [1] * len(out) and (out[:, 1:] == tokenizer.pad_token_id).all()


def test_sampling_is_seeded_and_reproducible(sharp_model, prompt_batch, tokenizer):
    rows = prompt_batch.repeat_interleave(3)
    p = params(tokenizer, temperature=1.0, top_p=0.95, top_k=50, seed=11)
    a = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], p)
    torch.rand(5)  # global RNG use in between must not matter
    b = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], p)
    c = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], params(tokenizer, seed=12))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert not torch.equal(a[0][0], a[0][1])  # one prefill, independent samples


def test_sampling_draws_what_todays_loop_draws_while_no_row_is_dropped(sharp_model, prompt_batch, tokenizer):
    p = params(tokenizer, temperature=0.7, seed=3, eos_token_ids=(tokenizer.eos_token_id,))
    ours, ours_mask, ours_lp = sample_static(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    today, _, today_lp = sample_with_log_probs(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    assert ours_mask.all()  # no EOS: today's loop drops no row, so both draw the same noise
    assert torch.equal(ours, today) and torch.allclose(ours_lp, today_lp, atol=1e-4)


def test_top_k_one_is_greedy(sharp_model, prompt_batch, tokenizer):
    greedy = sample_static(
        sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer, do_sample=False)
    )[0]
    top_k = sample_static(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer, top_k=1))
    assert torch.equal(greedy, top_k[0])


def test_eager_attention_gives_the_same_tokens(sharp_model, prompt_batch, tokenizer):
    p = eos_at_different_steps(sharp_model, prompt_batch, tokenizer)
    sdpa = sample_static(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    sharp_model.set_attn_implementation("eager")
    eager = sample_static(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], p)
    assert torch.equal(sdpa[0], eager[0]) and torch.allclose(sdpa[2], eager[2], atol=1e-4)


def test_selection_keeps_todays_loop_on_the_cpu_and_refuses_unsupported_models(sharp_model, prompt_batch, tokenizer):
    assert static_decode_supported(sharp_model) and not use_static_decode(sharp_model)
    with pytest.raises(ValueError, match="CUDA"):
        sample_static(sharp_model, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer), graph=True)
    sliding = copy.deepcopy(sharp_model)
    sliding.config.layer_types = ["sliding_attention"] * len(sliding.config.layer_types)
    assert not static_decode_supported(sliding)
    with pytest.raises(ValueError, match="sliding-window"):
        sample_static(sliding, prompt_batch["prompts"], prompt_batch["prompt_mask"], params(tokenizer))


def test_gqa_decode_equals_the_repeated_head_decode(sharp_model, prompt_batch, tokenizer, monkeypatch):
    """The decode without repeated KV heads gives transformers' sdpa decode (which repeats them): greedy tokens
    equal, log-probs to float rounding; so does seeded sampling."""
    import transformers.integrations.sdpa_attention as sdpa

    assert sharp_model.config.num_key_value_heads < sharp_model.config.num_attention_heads  # a GQA model
    repeats = []
    original = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda x, n: repeats.append(n) or original(x, n))
    rows = prompt_batch.repeat_interleave(2)
    for p in (eos_at_different_steps(sharp_model, rows, tokenizer), params(tokenizer, temperature=0.8, seed=5)):
        repeats.clear()
        ours = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], p)
        assert not repeats and sharp_model.config._attn_implementation == "sdpa"
        with monkeypatch.context() as m:
            m.setattr(static_decode, "attention", lambda model: contextlib.nullcontext())
            repeated = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], p)
        assert repeats  # transformers' sdpa repeated the KV heads there
        assert torch.equal(ours[0], repeated[0]) and torch.equal(ours[1], repeated[1])
        assert torch.allclose(ours[2], repeated[2], atol=1e-5)


def test_decoders_are_built_once_per_bucket_and_reused_across_calls(sharp_model, prompt_batch, tokenizer):
    graphs = DecodeGraphs(max_entries=2)
    rows = prompt_batch.repeat_interleave(2)
    greedy = eos_at_different_steps(sharp_model, rows, tokenizer)
    sampled = params(tokenizer, temperature=0.8, seed=5)
    fresh = {
        name: sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], p)
        for name, p in (("greedy", greedy), ("sampled", sampled))
    }
    for _ in range(2):  # the same shapes: one decoder, its buffers reset by each call
        again = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], greedy, graphs=graphs)
        assert all(torch.equal(a, b) for a, b in zip(again, fresh["greedy"]))
    assert graphs.builds == 1
    fewer = rows.index(list(range(len(rows) - 1)))  # one row less: the same batch bucket
    out = sample_static(sharp_model, fewer["prompts"], fewer["prompt_mask"], greedy, graphs=graphs)
    assert graphs.builds == 1 and torch.equal(out[0], fresh["greedy"][0][:-1])
    other_seed = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], sampled, graphs=graphs)
    assert graphs.builds == 2 and all(torch.equal(a, b) for a, b in zip(other_seed, fresh["sampled"]))
    reseeded = dataclasses.replace(sampled, seed=6)  # the seed is not part of the key
    sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], reseeded, graphs=graphs)
    assert graphs.builds == 2
    longer = dataclasses.replace(greedy, max_new_tokens=greedy.max_new_tokens + 100)  # another length bucket
    sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], longer, graphs=graphs)
    assert graphs.builds == 3 and len(graphs.entries) == 2  # the least recently used was dropped
    again = sample_static(sharp_model, rows["prompts"], rows["prompt_mask"], greedy, graphs=graphs)
    assert graphs.builds == 4 and all(torch.equal(a, b) for a, b in zip(again, fresh["greedy"]))


@pytest.fixture
def cuda_model(sharp_model):
    return sharp_model.to("cuda")


@pytest.mark.gpu
def test_cuda_graph_greedy_equals_hf_generate(cuda_model, prompt_batch, tokenizer):
    assert use_static_decode(cuda_model)
    for rows in (prompt_batch, prompt_batch.repeat_interleave(4)):
        p = eos_at_different_steps(cuda_model, rows, tokenizer)
        p = dataclasses.replace(p, max_new_tokens=40)  # well past the warm-up: many replays
        ours, ours_mask, ours_lp = sample_static(cuda_model, rows["prompts"], rows["prompt_mask"], p, graph=True)
        hf, hf_mask = sample_hf(cuda_model, rows["prompts"], rows["prompt_mask"], p)
        eager, _, eager_lp = sample_static(cuda_model, rows["prompts"], rows["prompt_mask"], p, graph=False)
        assert torch.equal(ours, hf) and torch.equal(ours_mask, hf_mask)
        assert torch.equal(ours, eager) and torch.allclose(ours_lp, eager_lp, atol=1e-4)
        assert ours_mask.sum(-1).min() < ours_mask.sum(-1).max()


@pytest.mark.gpu
def test_cuda_graph_sampling_is_seeded_and_matches_the_eager_step(cuda_model, prompt_batch, tokenizer):
    rows = prompt_batch.repeat_interleave(4)
    p = params(tokenizer, temperature=1.0, top_p=0.9, top_k=50, seed=7, max_new_tokens=40)
    a = sample_static(cuda_model, rows["prompts"], rows["prompt_mask"], p, graph=True)
    b = sample_static(cuda_model, rows["prompts"], rows["prompt_mask"], p, graph=True)
    c = sample_static(cuda_model, rows["prompts"], rows["prompt_mask"], params(tokenizer, seed=8, max_new_tokens=40))
    eager = sample_static(cuda_model, rows["prompts"], rows["prompt_mask"], p, graph=False)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert torch.equal(a[0], eager[0]) and torch.allclose(a[2], eager[2], atol=1e-4)


@pytest.mark.gpu
def test_cuda_graphs_are_captured_once_per_bucket(cuda_model, prompt_batch, tokenizer):
    graphs = DecodeGraphs()
    rows = prompt_batch.repeat_interleave(4)
    p = dataclasses.replace(eos_at_different_steps(cuda_model, rows, tokenizer), max_new_tokens=40)
    first = sample_static(cuda_model, rows["prompts"], rows["prompt_mask"], p, graphs=graphs)
    captured = [d.graph for d in graphs.entries.values()]
    second = sample_static(cuda_model, rows["prompts"], rows["prompt_mask"], p, graphs=graphs)
    assert graphs.builds == 1 and [d.graph for d in graphs.entries.values()] == captured and captured[0] is not None
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    hf, hf_mask = sample_hf(cuda_model, rows["prompts"], rows["prompt_mask"], p)
    assert torch.equal(second[0], hf) and torch.equal(second[1], hf_mask)
