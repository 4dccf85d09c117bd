"""Attention for the local engine's own passes: grouped-query attention without repeated KV heads, and packed rows.

``rlflow_attention`` is registered with transformers' ``AttentionInterface`` and switched on around a forward
by ``attention(model)``. Design notes: docs/design/logprob.md.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

log = logging.getLogger("rlflow.backends.local")

NAME = "rlflow_sdpa"
_registered = False
_nested_ok: dict[tuple, bool] = {}  # (device, dtype, heads, KV heads, head dim) -> whether jagged SDPA works


@dataclass(frozen=True)
class Varlen:
    """Rows packed into one sequence: ``bounds`` (host ints, [N + 1]) and the same offsets on the device."""

    bounds: tuple[int, ...]
    offsets: torch.Tensor
    max_length: int

    @classmethod
    def from_lengths(cls, lengths: list[int], device: torch.device) -> Varlen:
        bounds = [0]
        for n in lengths:
            bounds.append(bounds[-1] + n)
        offsets = torch.tensor(bounds, dtype=torch.long).to(device, non_blocking=True)
        return cls(tuple(bounds), offsets, max(lengths, default=0))


def supported(model) -> bool:
    """Whether ``attention(model)`` may take over: the model runs ``sdpa`` (other kernels are left alone)."""
    return getattr(model.config, "_attn_implementation", None) == "sdpa"


@contextlib.contextmanager
def attention(model):
    """Run ``model``'s forwards in this block with ``rlflow_attention`` (nothing changes unless it runs ``sdpa``)."""
    config = model.config
    before = getattr(config, "_attn_implementation", None)
    if before != "sdpa":
        yield
        return
    _register()
    config._attn_implementation = NAME
    if getattr(model, "is_gradient_checkpointing", False):
        # the backward recomputes the layers after this block ends: they must run the same attention again,
        # so a checkpointing model keeps this one (it computes what sdpa does, up to the kernel's rounding)
        yield
        return
    try:
        yield
    finally:
        config._attn_implementation = before


def _register() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(NAME, rlflow_attention)
        _registered = True


def rlflow_attention(
    module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    varlen: Varlen | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``[B, H, q, D]`` inputs, ``[B, q, H, D]`` output."""
    if varlen is not None:
        return _packed(query, key, value, varlen, scaling).transpose(1, 2).contiguous(), None
    if attention_mask is None:
        out = F.scaled_dot_product_attention(
            query,
            key,
            value,
            dropout_p=dropout,
            scale=scaling,
            is_causal=query.shape[2] > 1 and (is_causal if is_causal is not None else True),
            enable_gqa=True,
        )
        return out.transpose(1, 2).contiguous(), None
    return grouped_masked(query, key, value, attention_mask, dropout, scaling).transpose(1, 2).contiguous(), None


def grouped_masked(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    dropout: float = 0.0,
    scaling: float | None = None,
) -> torch.Tensor:
    """Masked attention ``[B, Hq, q, D]`` with the query heads of each KV head as rows over it (no repeated KV)."""
    batch, heads, q, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    if groups == 1:
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    rows = query.reshape(batch, kv_heads, groups * q, dim)  # query head h = kv head h // G: heads are grouped
    if q > 1:  # row g*q + i is query position i of group g: it takes position i's mask
        length = mask.shape[-1]
        mask = mask.expand(batch, 1, q, length)[:, :, None].expand(batch, 1, groups, q, length)
        mask = mask.reshape(batch, 1, groups * q, length)
    out = F.scaled_dot_product_attention(rows, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return out.view(batch, heads, q, dim)


def _packed(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, varlen: Varlen, scaling) -> torch.Tensor:
    """Causal attention inside each packed row of ``[1, H, T, D]`` inputs."""
    if query.device.type == "cuda" and _nested_works(query, key.shape[1]):
        return _packed_nested(query, key, value, varlen, scaling)
    return _packed_per_row(query, key, value, varlen, scaling)


def _nested_works(query: torch.Tensor, kv_heads: int) -> bool:
    """Whether jagged SDPA runs forward and backward here and agrees with per-row SDPA (probed once per kind of input).

    A probe on small tensors of the pass's dtype and head size, so that a torch build without the
    kernel (or with a backward it cannot take) falls back before a real pass depends on it.
    """
    kind = (str(query.device), query.dtype, query.shape[1], kv_heads, query.shape[-1])
    if kind not in _nested_ok:
        try:
            _nested_ok[kind] = _probe_nested(query, kv_heads)
        except (RuntimeError, NotImplementedError, ValueError, TypeError) as error:
            log.warning("packed attention: no jagged SDPA for %s (%s); one SDPA per row instead", kind, error)
            _nested_ok[kind] = False
    return _nested_ok[kind]


def _probe_nested(query: torch.Tensor, kv_heads: int) -> bool:
    with torch.enable_grad():  # the log-prob passes run under no_grad: the probe needs its own graph
        gen = torch.Generator(device=query.device).manual_seed(0)
        shapes = ((1, query.shape[1], 12, query.shape[-1]), (1, kv_heads, 12, query.shape[-1]))
        q, k, v = (
            torch.randn(shape, generator=gen, device=query.device).to(query.dtype).requires_grad_(True)
            for shape in (shapes[0], shapes[1], shapes[1])
        )
        probe = Varlen.from_lengths([5, 7], query.device)
        nested = _packed_nested(q, k, v, probe, None)
        nested.float().square().sum().backward()
    expected = _packed_per_row(q.detach(), k.detach(), v.detach(), probe, None)
    tolerance = 1e-2 if query.dtype in (torch.bfloat16, torch.float16) else 1e-4
    return bool(torch.allclose(nested.detach().float(), expected.float(), atol=tolerance))


def _packed_per_row(query, key, value, varlen: Varlen, scaling) -> torch.Tensor:
    parts = [
        F.scaled_dot_product_attention(
            query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], is_causal=True, scale=scaling, enable_gqa=True
        )
        for a, b in zip(varlen.bounds[:-1], varlen.bounds[1:])
        if b > a
    ]
    return torch.cat(parts, dim=2)


def _packed_nested(query, key, value, varlen: Varlen, scaling) -> torch.Tensor:
    """One jagged SDPA call (a variable-length flash kernel) over ``[1, H, T, D]``; KV heads repeated (linear in T)."""
    groups = query.shape[1] // key.shape[1]

    def jagged(x: torch.Tensor, repeat: int = 1) -> torch.Tensor:
        rows = x[0].transpose(0, 1)  # [T, H, D]
        if repeat > 1:
            rows = rows.repeat_interleave(repeat, dim=1)
        rows = rows.contiguous()
        nested = torch.nested.nested_tensor_from_jagged(rows, varlen.offsets, max_seqlen=varlen.max_length)
        return nested.transpose(1, 2)  # [N, H, j, D]

    out = F.scaled_dot_product_attention(
        jagged(query), jagged(key, groups), jagged(value, groups), is_causal=True, scale=scaling
    )
    return out.transpose(1, 2).values().transpose(0, 1)[None]  # [1, H, T, D]
