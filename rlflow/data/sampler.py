"""Which prompts each training step takes: epoch-wise seeded permutations, last partial batch dropped.

``(seed, epoch, position, offset)`` is the whole checkpointed state, so a resumed run draws the same prompts.
Design notes: docs/design/data.md.
"""

from __future__ import annotations

import random

from rlflow.errors import DataError, ResumeError


class StepSampler:
    """Yields dataset indices, ``batch_size`` per step; ``epoch`` is the epoch of the last prompt drawn."""

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
        self._drawn = 0  # prompts already drawn from this epoch
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.dataset_len))
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def next_indices(self) -> list[int]:
        return self.take(self.batch_size)

    def take(self, count: int) -> list[int]:
        """The next ``count`` indices; past the epoch's last whole batch they come from the next epoch."""
        indices: list[int] = []
        per_epoch = self.steps_per_epoch * self.batch_size
        while len(indices) < count:
            if self._drawn == per_epoch:
                self.epoch += 1
                self._drawn = 0
                self._order = self._permutation(self.epoch)
            part = min(count - len(indices), per_epoch - self._drawn)
            indices += self._order[self._drawn : self._drawn + part]
            self._drawn += part
        return indices

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "position": self._drawn // self.batch_size,  # whole batches drawn from this epoch
            "offset": self._drawn % self.batch_size,  # and prompts past them
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
        # a checkpoint written before refills drew single prompts has no offset
        self.epoch = int(state["epoch"])
        self._drawn = int(state["position"]) * self.batch_size + int(state.get("offset", 0))
        self._order = self._permutation(self.epoch)
