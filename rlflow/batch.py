"""``Batch``: the one data structure that flows between stages (rlflow's DataProto).

Per-row tensors, per-row Python lists and stage metrics, at widths fixed per step. This module does not import
torch. Design notes: docs/design/batch.md.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch


def is_array(value: Any) -> bool:
    """Whether ``value`` is a tensor field's value: a torch tensor or a numpy array."""
    if isinstance(value, np.ndarray):
        return True
    torch = sys.modules.get("torch")  # not loaded: then nothing here is a tensor
    return torch is not None and isinstance(value, torch.Tensor)


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor | np.ndarray] = field(default_factory=dict)
    non_tensors: dict[str, list] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._check_rows()

    def _check_rows(self) -> None:
        sizes = {k: v.shape[0] for k, v in self.tensors.items()} | {k: len(v) for k, v in self.non_tensors.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"batch fields disagree on the number of rows: {sizes}")

    def __len__(self) -> int:
        for value in self.tensors.values():
            return int(value.shape[0])
        for value in self.non_tensors.values():
            return len(value)
        return 0

    def __contains__(self, key: object) -> bool:
        return key in self.tensors or key in self.non_tensors

    def __getitem__(self, key: str) -> Any:
        if key in self.tensors:
            return self.tensors[key]
        if key in self.non_tensors:
            return self.non_tensors[key]
        raise KeyError(f"batch has no field {key!r}; it has {sorted(self.keys())}")

    def __setitem__(self, key: str, value: Any) -> None:
        if is_array(value):
            self.non_tensors.pop(key, None)
            self.tensors[key] = value
        else:
            self.tensors.pop(key, None)
            self.non_tensors[key] = list(value)
        self._check_rows()

    def keys(self) -> list[str]:
        return [*self.tensors, *self.non_tensors]

    def update(self, other: Batch) -> Batch:
        """Add (or replace) ``other``'s fields and metrics in place; returns self."""
        for key in other.keys():
            self[key] = other[key]
        self.metrics.update(other.metrics)
        return self

    def merged(self, other: Batch) -> Batch:
        """A new batch: this one's fields and metrics with ``other``'s added (or replacing); neither changes."""
        return Batch(dict(self.tensors), dict(self.non_tensors), dict(self.metrics)).update(other)

    def select(self, keys: Iterable[str]) -> Batch:
        keys = [k for k in keys if k in self]
        return Batch(
            {k: self.tensors[k] for k in keys if k in self.tensors},
            {k: self.non_tensors[k] for k in keys if k in self.non_tensors},
        )

    def index(self, rows: Iterable[int] | torch.Tensor | np.ndarray) -> Batch:
        rows = rows.tolist() if is_array(rows) else list(rows)
        return Batch(
            {k: _take(v, rows) for k, v in self.tensors.items()},
            {k: [v[i] for i in rows] for k, v in self.non_tensors.items()},
            dict(self.metrics),
        )

    def repeat_interleave(self, n: int) -> Batch:
        return self.index([i for i in range(len(self)) for _ in range(n)])

    def split(self, parts: int) -> list[Batch]:
        """``parts`` contiguous shards, sizes differing by at most one (empty shards allowed)."""
        total = len(self)
        bounds = [total * p // parts for p in range(parts + 1)]
        return [self.index(range(bounds[p], bounds[p + 1])) for p in range(parts)]

    def chunks(self, size: int) -> list[Batch]:
        return [self.index(range(s, min(s + size, len(self)))) for s in range(0, len(self), size)]

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        """Rows of all shards in order; metrics averaged over the shards that report them."""
        batches = [b for b in batches if len(b) or b.metrics]
        if not batches:
            return Batch()
        rows = [b for b in batches if len(b)]
        keys = rows[0].keys() if rows else []
        out = Batch(
            {k: _cat([b.tensors[k] for b in rows]) for k in keys if k in rows[0].tensors},
            {k: [x for b in rows for x in b.non_tensors[k]] for k in keys if k in rows[0].non_tensors},
        )
        names = {k for b in batches for k in b.metrics}
        for name in sorted(names):
            values = [b.metrics[name] for b in batches if name in b.metrics]
            out.metrics[name] = float(sum(values) / len(values))
        return out

    def to_numpy(self) -> Batch:
        """The same fields with numpy arrays for tensors (a CPU tensor's array shares its memory)."""
        return Batch(
            {k: v if isinstance(v, np.ndarray) else v.numpy(force=True) for k, v in self.tensors.items()},
            dict(self.non_tensors),
            dict(self.metrics),
        )

    def to_torch(self) -> Batch:
        """The same fields with torch tensors for numpy arrays (sharing their memory, unless read-only:
        Ray hands over arrays in its object store read-only, and those are copied)."""
        if not any(isinstance(v, np.ndarray) for v in self.tensors.values()):
            return self
        import torch

        return Batch(
            {k: _tensor(torch, v) if isinstance(v, np.ndarray) else v for k, v in self.tensors.items()},
            dict(self.non_tensors),
            dict(self.metrics),
        )


def _tensor(torch, array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array if array.flags.writeable else array.copy())


def _take(value: torch.Tensor | np.ndarray, rows: list[int]) -> torch.Tensor | np.ndarray:
    """Rows ``rows`` of ``value``, in that order, as a new array of the same kind."""
    if isinstance(value, np.ndarray):
        return value[np.asarray(rows, dtype=np.int64)]
    import torch

    return value.index_select(0, torch.tensor(rows, dtype=torch.long))


def _cat(values: list) -> torch.Tensor | np.ndarray:
    if isinstance(values[0], np.ndarray):
        return np.concatenate(values)
    import torch

    return torch.cat(values)


def response_span(response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's response through its last model token: the attention mask of the response.

    ``response_mask`` is 1 on the tokens the model wrote (what the loss counts); a multi-turn
    transcript has 0 on the tool answers between its turns, which the model still read. A single-turn
    response (1 through EOS, 0 after) is its own span.
    """
    return (response_mask.flip(-1).cumsum(-1).flip(-1) > 0).to(response_mask.dtype)
