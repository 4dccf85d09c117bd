"""Per-token reward arrays for reward stages: a row's score on its last response token, as verl's rule-based rewards do."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


def place_on_last_token(scores: list[float], response_mask: np.ndarray) -> np.ndarray:
    """A float32 [rows, response] array, zero but for each row's score on its last valid token
    (index 0 for an empty response)."""
    import numpy as np

    mask = np.asarray(response_mask)
    rows = len(scores)
    out = np.zeros((rows, mask.shape[-1]), dtype=np.float32)
    last = np.maximum(mask.sum(axis=-1).astype(np.int64) - 1, 0)
    out[np.arange(rows), last] = np.asarray(scores, dtype=np.float32)
    return out
