"""Rollout weights over the wire: split into frames under the size cap, staged whole on the server.

A local actor's weights reach a remote rollout through ``load_rollout_weights``: the client
packs the tensors into as few parts as fit ``max_message_bytes`` each (a tensor is never cut;
one larger than a frame is refused with the fix), and sends them as calls of one transfer
(``transfer`` id, ``part``, ``parts``, ``global_steps``). The server stages the parts and hands
the engine the whole state only with the last one, under the engine lock: a ``generate`` from
another connection sees the old weights or the new ones, never a mix. One transfer is staged at
a time (a new first part drops an unfinished one), so staging holds at most one model's weights.
"""

from __future__ import annotations

from typing import Any

import torch

from rlflow.backends.remote import wire
from rlflow.errors import BackendError

HEADER_BYTES = 4096  # a part's header without its descriptors (method, ids, args)
DESCRIPTOR_BYTES = 512  # generous bound on one tensor's descriptor (a long name included)
MAX_PARTS = 100_000


def split_weights(state: dict[str, torch.Tensor], max_message_bytes: int) -> list[dict[str, torch.Tensor]]:
    """``state`` in order, packed into parts whose frames stay under ``max_message_bytes``."""
    parts: list[dict[str, torch.Tensor]] = [{}]
    used = HEADER_BYTES
    for name, tensor in state.items():
        size = _framed(tensor)
        if HEADER_BYTES + size > max_message_bytes:
            raise wire.FrameTooLarge(
                f"load_rollout_weights: tensor {name!r} alone needs {HEADER_BYTES + size} bytes, more than "
                f"max_message_bytes={max_message_bytes} (raise max_message_bytes in the resource config)"
            )
        if parts[-1] and used + size > max_message_bytes:
            parts.append({})
            used = HEADER_BYTES
        parts[-1][name] = tensor
        used += size
    return parts


def _framed(tensor: torch.Tensor) -> int:
    nbytes = tensor.numel() * tensor.element_size()
    return DESCRIPTOR_BYTES + nbytes + (-nbytes % wire.ALIGN)


class WeightStaging:
    """The parts of the transfer in progress; ``add`` returns the whole state with the last part."""

    def __init__(self) -> None:
        self._transfer: str | None = None
        self._state: dict[str, torch.Tensor] = {}
        self._next = 0

    def add(self, args: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        transfer, part, parts = args.get("transfer"), args.get("part"), args.get("parts")
        if not isinstance(transfer, str) or not transfer:
            raise BackendError("load_rollout_weights: 'transfer' must be a non-empty string")
        if not (_count(parts) and 1 <= parts <= MAX_PARTS and _count(part) and 0 <= part < parts):
            raise BackendError(
                f"load_rollout_weights: need 0 <= part < parts <= {MAX_PARTS}, got part={part!r}, parts={parts!r}"
            )
        if part == 0:  # a new transfer; an unfinished one (its client gave up) is dropped
            self._transfer, self._state, self._next = transfer, {}, 0
        elif transfer != self._transfer or part != self._next:
            self.clear()
            raise BackendError(
                f"load_rollout_weights: part {part} of transfer {transfer} arrived out of order "
                "(another transfer interleaved, or its first parts were lost); resend the whole transfer"
            )
        self._state.update(tensors)
        self._next = part + 1
        if self._next < parts:
            return None
        state = self._state
        self.clear()
        return state

    def clear(self) -> None:
        self._transfer, self._state, self._next = None, {}, 0


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
