"""``sync``: every stage of a step in turn, in PPOTrainerSync's order (the default mode)."""

from __future__ import annotations

from typing import Any

from rlflow.batch import Batch
from rlflow.metrics import off_policy_metrics
from rlflow.runtime.modes.base import TrainerMode, register_trainer
from rlflow.runtime.sinks import StepTimer


@register_trainer("sync")
class SyncMode(TrainerMode):
    def step(self, step: int) -> dict[str, Any]:
        loop = self.loop
        timer = StepTimer()
        epoch = loop.data.sampler.epoch
        batch = loop.sample_batch(step)
        return loop.run_stages(step, batch, loop.plan.step, timer, epoch, self)

    def on_sample_end(self, step: int, batch: Batch) -> Batch:
        batch.metrics.update(off_policy_metrics(step, [step - 1] * len(batch)))  # on-policy: verl logs zeros
        return batch
