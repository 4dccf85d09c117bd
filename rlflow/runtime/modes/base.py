"""``TrainerMode``: the base of the trainer modes, their registry and the hooks the step loop calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rlflow.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from rlflow.batch import Batch
    from rlflow.plan.model import PlanStage
    from rlflow.runtime.trainer import StepLoop

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
    """Runs the training steps of one attempt over a ``StepLoop`` (its data, plan, executor, sinks).

    Subclasses implement ``step``; the hooks are verl v1's: ``on_init_end`` once before the first
    step, ``on_sample_end`` when a step's batch has been sampled, ``on_step_end`` when a step is done
    (by default: its metrics are logged).
    """

    name: ClassVar[str]

    def __init__(self, loop: StepLoop) -> None:
        self.loop = loop

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

    def step(self, step: int) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    # ---- hooks --------------------------------------------------------------------------------
    def on_init_end(self, start: int) -> None:
        """Before the first step of this attempt (``start`` is 1, or the step after a checkpoint)."""

    def on_sample_end(self, step: int, batch: Batch) -> Batch:
        """A step's batch has been generated; returns the batch the step trains on."""
        return batch

    def on_step_end(self, step: int, metrics: dict[str, Any]) -> None:
        self.loop.log_metrics(step, metrics)

    # ---- what the loop asks of a mode ---------------------------------------------------------
    def sync_weights(self, stage: PlanStage, batch: Batch, step: int) -> None:
        """The weight-sync stage of ``step``: by default run and wait for it."""
        self.loop.sync_weights(stage, batch, step)

    def save_state(self, step: int, directory: Path) -> dict[str, Any]:
        """Write what this mode needs for an exact resume into the checkpoint ``directory``; returns
        entries for the checkpoint's state. Default: nothing."""
        return {}

    def load_state(self, state: dict[str, Any], directory: Path) -> None:
        """Take back what ``save_state`` wrote (resume)."""

    def close(self) -> None:
        """End of the attempt (also on an error or an interrupt): nothing may stay in flight."""
