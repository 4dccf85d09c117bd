"""Rollout weights over the wire: split into frames under the size cap, staged whole on the server.

A ``generate`` sees the old weights or the new ones, never a mix. Design notes: docs/design/wire.md.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from rlflow.backends.remote import wire
from rlflow.errors import BackendError

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.backends.engine import Engine

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

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self._transfer: str | None = None
        self._state: dict[str, torch.Tensor] = {}
        self._next = 0
        self._bytes = 0

    def add(self, args: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        transfer, part, parts = args.get("transfer"), args.get("part"), args.get("parts")
        if not isinstance(transfer, str) or not transfer:
            raise BackendError("load_rollout_weights: 'transfer' must be a non-empty string")
        if not (_count(parts) and 1 <= parts <= MAX_PARTS and _count(part) and 0 <= part < parts):
            raise BackendError(
                f"load_rollout_weights: need 0 <= part < parts <= {MAX_PARTS}, got part={part!r}, parts={parts!r}"
            )
        if part == 0:  # a new transfer; an unfinished one (its client gave up) is dropped
            self.clear()
            self._transfer = transfer
        elif transfer != self._transfer or part != self._next:
            self.clear()
            raise BackendError(
                f"load_rollout_weights: part {part} of transfer {transfer} arrived out of order "
                "(another transfer interleaved, or its first parts were lost); resend the whole transfer"
            )
        self._bytes += sum(t.numel() * t.element_size() for t in tensors.values())
        if self.max_bytes is not None and self._bytes > self.max_bytes:
            self.clear()
            raise BackendError(
                f"load_rollout_weights: the transfer exceeds {self.max_bytes} bytes, twice the served model's "
                "size; are both sides on the same model.path?"
            )
        self._state.update(tensors)
        self._next = part + 1
        if self._next < parts:
            return None
        state = self._state
        self.clear()
        return state

    def clear(self) -> None:
        self._transfer, self._state, self._next, self._bytes = None, {}, 0, 0


MAX_VERSION = 2**31 - 1  # a policy version is a step number


def check_pushed(state: dict[str, torch.Tensor], version: Any) -> None:
    """Refuse a pushed state the rollout must never serve: a version that is no step number, or tensors that
    are not real floating-point numbers (bool, integer, complex) or hold NaN or infinity. Checked before the
    engine sees any of it, so a refused push leaves the served weights as they were."""
    if not (_count(version) and 0 <= version <= MAX_VERSION):
        raise BackendError(
            f"load_rollout_weights: global_steps must be a step number 0..{MAX_VERSION}, got {version!r}"
        )
    for name, tensor in state.items():
        if not tensor.dtype.is_floating_point:
            raise BackendError(f"load_rollout_weights: tensor {name!r} is {tensor.dtype}; weights are floating point")
        if not bool(torch.isfinite(tensor).all()):
            raise BackendError(f"load_rollout_weights: tensor {name!r} holds NaN or infinity; not served")


def staging_limit(engine: Any) -> int | None:
    """Twice the bytes of the engine's model (``engine.model``, as the local engine holds it), or None
    for an engine that does not show its model (then only the frame cap bounds each part)."""
    model = getattr(engine, "model", None)
    state_dict = getattr(model, "state_dict", None)
    if not callable(state_dict):
        return None
    return 2 * sum(t.numel() * t.element_size() for t in state_dict().values())


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load_pushed(engine: Engine, args: dict[str, Any], state: dict[str, Any] | None) -> dict[str, float]:
    """The engine takes the whole state and its version in one step (the caller holds the engine lock)."""
    if state is None:  # a part staged; the weights load with the last one
        return {}
    load = getattr(engine, "load_rollout_weights", None)
    if load is None:
        raise BackendError(
            f"the served engine {type(engine).__name__} cannot take rollout weights (it has no load_rollout_weights)"
        )
    version = args.get("global_steps")  # may go back: a resumed run starts again from its checkpoint's step
    check_pushed(state, version)
    if takes_version(load):
        return floats(load(state, version))
    warnings.warn(
        f"the served engine {type(engine).__name__}'s load_rollout_weights(state) takes no version: write "
        "load_rollout_weights(state, global_steps) (the one-argument form goes in the next release)",
        DeprecationWarning,
        stacklevel=1,
    )
    metrics = load(state)
    engine.set_global_steps(version)
    return floats(metrics)


def takes_version(load: Callable) -> bool:
    """Whether an engine's ``load_rollout_weights`` takes ``(state, global_steps)`` (else the older ``(state)``)."""
    try:
        params = inspect.signature(load).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: assume the current form
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def floats(metrics: dict[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in metrics.items()}
