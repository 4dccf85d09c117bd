"""rlflow's attention function: grouped-query attention without repeated KV heads, packed rows without a mask."""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import repeat_kv

from rlflow.backends.local import attention
from rlflow.backends.local.attention import Varlen, grouped_masked


def test_grouped_attention_equals_attention_over_repeated_kv_heads():
    """Query heads as rows over their shared KV head: the attention of repeated heads, prefill (q > 1) and decode."""
    gen = torch.Generator().manual_seed(0)
    for q in (1, 5):
        query, key, value = (torch.randn(shape, generator=gen) for shape in ((3, 6, q, 8), (3, 2, 9, 8), (3, 2, 9, 8)))
        allowed = torch.rand((3, 1, q, 9), generator=gen) > 0.3
        allowed[..., 0] = True
        mask = (~allowed).float() * torch.finfo(torch.float32).min
        expected = torch.nn.functional.scaled_dot_product_attention(
            query, repeat_kv(key, 3), repeat_kv(value, 3), attn_mask=mask
        )
        assert torch.allclose(grouped_masked(query, key, value, mask), expected, atol=1e-6)


def packed_inputs(lengths: list[int], device: str = "cpu", dtype=torch.float32):
    gen = torch.Generator(device=device).manual_seed(1)
    total = sum(lengths)
    return [torch.randn((1, heads, total, 16), generator=gen, device=device).to(dtype) for heads in (6, 2, 2)]


def per_sequence(query, key, value, lengths):
    """Each row alone, causal, over repeated KV heads: what packed attention must equal."""
    outs, start = [], 0
    for n in lengths:
        rows = slice(start, start + n)
        outs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, rows], repeat_kv(key[:, :, rows], 3), repeat_kv(value[:, :, rows], 3), is_causal=True
            )
        )
        start += n
    return torch.cat(outs, dim=2)


def test_packed_rows_attend_only_inside_themselves():
    lengths = [4, 1, 7]
    query, key, value = packed_inputs(lengths)
    out, _ = attention.rlflow_attention(None, query, key, value, None, varlen=Varlen.from_lengths(lengths, "cpu"))
    assert out.shape == (1, sum(lengths), 6, 16)
    assert torch.allclose(out.transpose(1, 2), per_sequence(query, key, value, lengths), atol=1e-6)


def test_the_jagged_kernel_is_probed_and_refused_where_it_cannot_run():
    """The CPU has no causal jagged SDPA: the probe says so (once) and packed passes use per-row SDPA."""
    attention._nested_ok.clear()
    assert not attention._nested_works(torch.zeros((1, 6, 3, 16)), 2)
    assert list(attention._nested_ok.values()) == [False]


@pytest.mark.gpu
def test_the_jagged_kernel_runs_on_cuda_and_equals_per_row_attention():
    lengths = [5, 1, 30, 12]
    query, key, value = packed_inputs(lengths, "cuda", torch.bfloat16)
    assert attention._nested_works(query, 2), "no jagged SDPA: packed passes fall back to one SDPA per row"
    out = attention._packed_nested(query, key, value, Varlen.from_lengths(lengths, query.device), None)
    expected = per_sequence(query.float(), key.float(), value.float(), lengths)
    assert torch.allclose(out.float(), expected, atol=2e-2)
