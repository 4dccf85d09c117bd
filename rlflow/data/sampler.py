"""Which prompts each training step takes: epoch-wise seeded permutations, last partial batch dropped.

The order of epoch ``e`` is a permutation drawn from ``random.Random(f"{seed}:{e}")`` (string
seeds are hashed the same way on every platform and Python version), so any position can be
recomputed from ``(seed, epoch, position)`` alone: that triple is the whole checkpointed state,
and a resumed run draws exactly the batches the uninterrupted run would have drawn.
"""

from __future__ import annotations

import random

from rlflow.errors import DataError, ResumeError


class StepSampler:
    """Yields ``batch_size`` dataset indices per step; ``epoch`` is the epoch of the last batch drawn."""

    def __init__(self, dataset_len: int, batch_size: int, seed: int, shuffle: bool = True) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        if dataset_len < batch_size:
            raise DataError(
                f"the training set has {dataset_len} prompts, fewer than trainer.train_batch_size="
                f"{batch_size}; lower train_batch_size or add data"
            )
        self.dataset_len, self.batch_size, self.seed, self.shuffle = dataset_len, batch_size, seed, shuffle
        self.steps_per_epoch = dataset_len // batch_size
        self.epoch = 0
        self._position = 0  # batches already drawn from this epoch
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.dataset_len))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def next_indices(self) -> list[int]:
        if self._position == self.steps_per_epoch:
            self.epoch += 1
            self._position = 0
            self._order = self._permutation(self.epoch)
        start = self._position * self.batch_size
        self._position += 1
        return self._order[start : start + self.batch_size]

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "position": self._position,
            "seed": self.seed,
            "dataset_len": self.dataset_len,
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``'s position; refused when the data or batching it was saved with differ."""
        mine = self.state_dict()
        changed = [k for k in ("seed", "dataset_len", "batch_size", "shuffle") if state.get(k) != mine[k]]
        if changed:
            detail = ", ".join(f"{k}: saved {state.get(k)!r}, now {mine[k]!r}" for k in changed)
            raise ResumeError(f"cannot resume the data position: {detail}; resume with the same data and batch size")
        self.epoch, self._position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)
