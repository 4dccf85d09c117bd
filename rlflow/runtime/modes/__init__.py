"""Trainer modes by name, as verl v1's ``register_trainer``: how the step loop schedules a step's stages.

``sync`` runs them one after another (verl's PPOTrainerSync); ``separate_async`` samples the next
steps' batches on the rollout's own resource while the current step trains. The loop picks a mode
by ``trainer.trainer_mode``; a mode is a ``TrainerMode`` subclass with verl's hooks.
"""

from __future__ import annotations

from rlflow.runtime.modes.base import TRAINER_MODES, TrainerMode, get_trainer_mode, register_trainer
from rlflow.runtime.modes.separate_async import SeparateAsyncMode
from rlflow.runtime.modes.sync import SyncMode

__all__ = ["TRAINER_MODES", "SeparateAsyncMode", "SyncMode", "TrainerMode", "get_trainer_mode", "register_trainer"]
