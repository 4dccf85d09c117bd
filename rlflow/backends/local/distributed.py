"""Data parallelism for the local backend: one process group, gradient and metric averaging.

Plain ``torch.distributed``, a full replica per rank, gradients averaged in one flat all-reduce; the helpers do
nothing for one rank. Design notes: docs/design/local_engine.md.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from rlflow.errors import BackendError


def init_group(rank: int, world_size: int, device: torch.device, options: dict | None) -> None:
    if world_size <= 1 or dist.is_initialized():
        return
    options = options or {}
    if "master_addr" not in options or "master_port" not in options:
        raise BackendError(
            f"local engine rank {rank}/{world_size}: data parallelism needs dist={{'master_addr', 'master_port'}}; "
            f"got {sorted(options)}"
        )
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{options['master_addr']}:{options['master_port']}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=float(options.get("timeout_s", 1800))),
    )


def close_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def broadcast_parameters(module: torch.nn.Module, world_size: int) -> None:
    if world_size <= 1:
        return
    for tensor in module.state_dict().values():
        dist.broadcast(tensor, src=0)


def average_gradients(params: list[torch.nn.Parameter], world_size: int) -> None:
    """Average ``.grad`` over ranks in one flat all-reduce (a missing grad counts as zero)."""
    if world_size <= 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world_size
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


def all_reduce(values: torch.Tensor, world_size: int, op: str = "sum") -> torch.Tensor:
    """Sum, mean or max of ``values`` over ranks (returns ``values`` itself for one rank)."""
    if world_size <= 1:
        return values
    reduce_op = dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM
    dist.all_reduce(values, op=reduce_op)
    return values / world_size if op == "mean" else values


def all_gather_ints(values: list[int], world_size: int) -> list[int]:
    """Every rank's ``values`` concatenated in rank order (``values`` itself for one rank)."""
    if world_size <= 1:
        return list(values)
    parts: list[list[int] | None] = [None] * world_size
    dist.all_gather_object(parts, [int(v) for v in values])
    return [v for part in parts for v in part]
