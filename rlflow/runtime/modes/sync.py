"""``sync``: every stage of a step in turn, in PPOTrainerSync's order (the default mode)."""

from __future__ import annotations

from rlflow.batch import Batch
from rlflow.metrics import off_policy_metrics
from rlflow.runtime import dynamic_sampling
from rlflow.runtime.modes.base import TrainerMode, register_trainer
from rlflow.runtime.step_record import StepRecord


@register_trainer("sync")
class SyncMode(TrainerMode):
    def sample(self, step: int, record: StepRecord) -> Batch:
        def run(batch: Batch) -> Batch:
            return self.loop.run_stages(self.sampling, batch, record)[0]

        if not self.loop.plan.refill:
            return run(self.loop.draw(step))
        # DAPO's dynamic sampling: generate and score fresh prompts until the batch is full
        return dynamic_sampling.fill_batch(
            run, lambda count: self.loop.draw(step, count), self.loop.refill_rules(), step
        )

    def on_sample_end(self, step: int, batch: Batch) -> Batch:
        batch.metrics.update(off_policy_metrics(step, [step - 1] * len(batch)))  # on-policy: verl logs zeros
        return batch
