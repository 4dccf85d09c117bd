"""``sync``: every stage of a step in turn, in PPOTrainerSync's order (the default mode)."""

from __future__ import annotations

import time
from typing import Any

from rlflow.batch import Batch
from rlflow.metrics import off_policy_metrics
from rlflow.runtime import dynamic_sampling
from rlflow.runtime.modes.base import TrainerMode, register_trainer
from rlflow.runtime.sinks import StepTimer


@register_trainer("sync")
class SyncMode(TrainerMode):
    def step(self, step: int) -> dict[str, Any]:
        loop, timer = self.loop, StepTimer()
        epoch, step_start = loop.data.sampler.epoch, time.perf_counter()
        if not loop.plan.refill:
            return loop.run_stages(step, loop.sample_batch(step), loop.plan.step, timer, epoch, self)
        # DAPO's dynamic sampling: the refill stages run until the batch is full, then the rest of the step
        batch = dynamic_sampling.fill_batch(loop.executor, loop.plan, loop.data, loop.spec, step, timer)
        batch = self.on_sample_end(step, batch)
        rest = [s for s in loop.plan.step if s.name not in loop.plan.refill]
        return loop.run_stages(step, batch, rest, timer, epoch, self, step_start=step_start)

    def on_sample_end(self, step: int, batch: Batch) -> Batch:
        batch.metrics.update(off_policy_metrics(step, [step - 1] * len(batch)))  # on-policy: verl logs zeros
        return batch
