"""Per-token reward tensors for reward stages: a row's score on its last response token, as verl's rule-based rewards do."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import torch


def place_on_last_token(scores: list[float], response_mask: torch.Tensor) -> torch.Tensor:
    """A float32 [rows, response] tensor, zero but for each row's score on its last valid token
    (index 0 for an empty response)."""
    import torch

    lengths = response_mask.sum(dim=-1).tolist()
    rows = len(scores)
    out = torch.zeros(rows, response_mask.shape[-1], dtype=torch.float32)
    last = torch.tensor([max(int(n) - 1, 0) for n in lengths], dtype=torch.long)
    out[torch.arange(rows), last] = torch.tensor(scores, dtype=torch.float32)
    return out
