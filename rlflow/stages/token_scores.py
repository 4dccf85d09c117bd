"""Per-token reward arrays for reward stages: a row's score on its last response token, as verl's rule-based rewards do."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


def place_on_last_token(scores: list[float], response_mask: np.ndarray) -> np.ndarray:
    """A float32 [rows, response] array, zero but for each row's score on its last valid token
    (index 0 for an empty response). The last 1 of the mask, not its count: a multi-turn
    transcript's mask has 0 on the tool answers between turns (verl counts its attention mask)."""
    import numpy as np

    mask = np.asarray(response_mask)
    rows = len(scores)
    out = np.zeros((rows, mask.shape[-1]), dtype=np.float32)
    last = np.maximum(response_lengths(mask) - 1, 0)
    out[np.arange(rows), last] = np.asarray(scores, dtype=np.float32)
    return out


def response_lengths(response_mask: np.ndarray) -> np.ndarray:
    """Each row's tokens through its last model token: the length verl reads from its attention mask, which
    counts a multi-turn transcript's tool answers (0 in the mask between the model's turns)."""
    import numpy as np

    written = np.asarray(response_mask) != 0
    return np.where(written.any(axis=-1), written.shape[-1] - np.argmax(written[:, ::-1], axis=-1), 0)
