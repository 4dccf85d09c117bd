"""DAPO's overlong reward shaping: a response that runs into the last ``len`` tokens of the budget loses reward.

As verl's DAPO reward manager computes it per row. Numpy only: a reward worker never imports torch.
Design notes: docs/design/reward.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


class OverlongBuffer(BaseModel):
    """verl's ``overlong_buffer`` settings (DAPO recipe: ``reward_model.overlong_buffer``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enable: bool = False
    len: int = Field(0, ge=0, description="The last tokens of the response budget where the penalty grows.")
    penalty_factor: float = Field(0.0, ge=0, description="The penalty at the full budget (DAPO: 1.0).")
    log: bool = Field(False, description="Add overlong_reward and overlong to each row's reward_extra.")

    def problem(self, max_resp_len: int) -> str | None:
        """Why these settings cannot shape responses of at most ``max_resp_len`` tokens (verl asserts the same)."""
        if not self.enable:
            return None
        if self.len <= 0:
            return "overlong_buffer.len must be positive when the buffer is enabled"
        if self.len > max_resp_len:
            return f"overlong_buffer.len {self.len} is longer than data.max_response_length {max_resp_len}"
        return None


def overlong_penalties(lengths: np.ndarray, buffer: OverlongBuffer, max_resp_len: int) -> np.ndarray:
    """The penalty of each response of ``lengths`` tokens (float32, <= 0)."""
    import numpy as np

    exceed = np.asarray(lengths, dtype=np.int64) - (max_resp_len - buffer.len)
    penalty = (-exceed).astype(np.float32) / np.float32(buffer.len) * np.float32(buffer.penalty_factor)
    return np.minimum(penalty, np.float32(0.0))


def shape_scores(
    scores: list[float], lengths: np.ndarray, buffer: OverlongBuffer, max_resp_len: int, extras: list[dict]
) -> tuple[list[float], dict[str, float]]:
    """``scores`` with the penalties added (float32 sums, as verl's reward tensor holds them), and metrics."""
    import numpy as np

    penalties = overlong_penalties(lengths, buffer, max_resp_len)
    shaped = (np.asarray(scores, dtype=np.float32) + penalties).astype(np.float32)
    if buffer.log:
        for extra, penalty in zip(extras, penalties.tolist()):
            extra["overlong_reward"] = penalty
            extra["overlong"] = float(penalty < 0)
    rows = max(len(scores), 1)
    metrics = {
        "reward/overlong_reward": float(penalties.sum()) / rows,
        "reward/overlong_ratio": float((penalties < 0).sum()) / rows,
    }
    return shaped.tolist(), metrics
