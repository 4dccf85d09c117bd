"""``TrainerMode``: the base of the trainer modes (the step template and verl v1's hooks), and their registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rlflow.batch import Batch
from rlflow.errors import ConfigError
from rlflow.runtime.step_record import StepRecord

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from rlflow.runtime.executor import TransferHandle
    from rlflow.runtime.step_loop import StepLoop

TRAINER_MODES: dict[str, type[TrainerMode]] = {}


def register_trainer(name: str):
    """Class decorator registering a ``TrainerMode`` subclass under ``name`` (verl's spelling)."""

    def register(cls: type[TrainerMode]) -> type[TrainerMode]:
        if name in TRAINER_MODES:
            raise ValueError(f"trainer mode {name!r} is registered twice")
        cls.name = name
        TRAINER_MODES[name] = cls
        return cls

    return register


def get_trainer_mode(name: str) -> type[TrainerMode]:
    try:
        return TRAINER_MODES[name]
    except KeyError:
        raise ConfigError(f"unknown trainer mode {name!r}; known: {', '.join(sorted(TRAINER_MODES))}") from None


class TrainerMode:
    """Runs the training steps of one attempt over a ``StepLoop``, one step in verl v1's ``_step_once`` shape.

    ``step`` is the template every mode shares: sample the batch (``sample``, the mode's own), the hook
    ``on_sample_end``, the trainer lane's stages through the weight sync, the hook ``on_weights_sent``
    (the mode decides when a weight transfer is waited for), the stages after it (checkpoint, validation),
    then ``on_step_end`` (by default: the step's metrics are logged). A mode reaches the loop only through
    the methods ``StepLoop`` documents for modes (tests/test_layers.py checks it).
    """

    name: ClassVar[str]

    def __init__(self, loop: StepLoop) -> None:
        self.loop = loop
        step = loop.plan.step
        rollout = loop.plan.first_with_role("rollout")
        if loop.plan.refill:  # DAPO's dynamic sampling: these stages repeat until the batch is full
            self.sampling = tuple(s for s in step if s.name in loop.plan.refill)
        else:
            self.sampling = step[: step.index(rollout) + 1] if rollout is not None else ()
        lane = tuple(s for s in step if s not in self.sampling)
        syncs = [i for i, s in enumerate(lane) if s.role == "weight_sync"]
        at = syncs[-1] + 1 if syncs else len(lane)
        self.training, self.closing = lane[:at], lane[at:]  # through the weight sync; checkpoint, validation

    def train(self, start: int) -> dict[str, Any]:
        last: dict[str, Any] = {}
        self.on_init_end(start)
        try:
            for step in range(start, self.loop.total + 1):
                last = self.step(step)
                self.on_step_end(step, last)
                self.loop.commit_checkpoint(step)  # after the step's metrics: a committed step is a logged one
        finally:
            self.loop.abort_checkpoint()
            self.close()
        return last

    def step(self, step: int) -> dict[str, Any]:
        record = StepRecord(step, self.loop.epoch)  # the epoch the step's prompts are drawn from
        batch = self.sample(step, record)  # 1. generate (and, when dynamic sampling is on, score and refill)
        batch = self.on_sample_end(step, batch)
        batch, transfers = self.loop.run_stages(self.training, batch, record)  # 2-9: reward ... update, sync
        batch = self.on_weights_sent(step, batch, transfers)
        batch, _ = self.loop.run_stages(self.closing, batch, record)  # save_checkpoint, validate
        return self.loop.finish_step(batch, record)

    def sample(self, step: int, record: StepRecord) -> Batch:  # pragma: no cover - abstract
        """Step ``step``'s generated batch (the stages of ``self.sampling`` done)."""
        raise NotImplementedError

    # ---- hooks --------------------------------------------------------------------------------
    def on_init_end(self, start: int) -> None:
        """Before the first step of this attempt (``start`` is 1, or the step after a checkpoint)."""

    def on_sample_end(self, step: int, batch: Batch) -> Batch:
        """A step's batch has been generated; returns the batch the step trains on."""
        return batch

    def on_weights_sent(self, step: int, batch: Batch, transfers: list[TransferHandle]) -> Batch:
        """The update's weights were sent to a rollout on another pool (``transfers``; none when the rollout
        shares the actor's pool): by default wait for them, their ``sync/*`` metrics into the batch's."""
        metrics = dict(batch.metrics)
        for transfer in transfers:
            metrics.update(self.loop.wait_transfer(transfer))
        return Batch(batch.tensors, batch.non_tensors, metrics)

    def on_step_end(self, step: int, metrics: dict[str, Any]) -> None:
        self.loop.log_metrics(step, metrics)

    # ---- checkpoints --------------------------------------------------------------------------
    def save_state(self, step: int, directory: Path) -> dict[str, Any]:
        """Write what this mode needs for an exact resume into the checkpoint ``directory``; returns
        entries for the checkpoint's state. Default: nothing."""
        return {}

    def load_state(self, state: dict[str, Any], directory: Path) -> None:
        """Take back what ``save_state`` wrote (resume)."""

    def close(self) -> None:
        """End of the attempt (also on an error or an interrupt): nothing may stay in flight."""
