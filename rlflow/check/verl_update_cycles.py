"""verl's update cycles of a separate-async step (``parameter_sync_step``) against a plan's mini-batches.

Only what no ``parameter_sync_step`` can match is a difference. Design notes:
docs/design/verl_update_cycles.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlflow.check.verl_source import Site
from rlflow.schemas.pipeline import Pipeline

LOOP = "range(self.parameter_sync_step)"  # the loop of verl's PPOTrainer.step around _step_once
KNOB = "trainer.v1.separate_async.parameter_sync_step"
CONFIG = Path("verl") / "trainer" / "config" / "ppo_trainer.yaml"  # where verl's default is set


@dataclass(frozen=True)
class UpdateCycles:
    """The ``parameter_sync_step`` a plan runs as (None: none, or verl repeats nothing), verl's default, and the
    differences no ``parameter_sync_step`` removes."""

    equals: int | None = None
    default: int | None = None
    differences: tuple[str, ...] = ()

    def describe(self) -> str:
        """For the check's summary: which verl setting the plan's update matches."""
        if self.equals is None:
            return ""
        default = ""
        if self.default is not None:
            default = ", its default" if self.default == self.equals else f", not its default {self.default}"
        return f"as verl with {KNOB}={self.equals}{default}: the update's {self.equals} mini-batches are its cycles"


def compare_update_cycles(spec: Pipeline, step: Sequence[Site], root: Path) -> UpdateCycles:
    """Compare the plan's mini-batches per step with the cycles verl's separate-async ``step`` repeats."""
    looped = [site for site in step if LOOP in site.loops]
    if not looped:
        return UpdateCycles()  # verl's step runs its lane once: as rlflow's does
    t = spec.trainer
    where = f"verl repeats its trainer lane in a loop over `{LOOP}` ({looped[0].where})"
    if t.train_batch_size % t.ppo_mini_batch_size:
        return UpdateCycles(
            default=verl_default(root),
            differences=(
                f"{where}, one mini-batch a cycle, and asserts train_batch_size == parameter_sync_step * "
                f"ppo_mini_batch_size: no parameter_sync_step matches train_batch_size {t.train_batch_size} with "
                f"ppo_mini_batch_size {t.ppo_mini_batch_size} (rlflow's last mini-batch is a shorter one)",
            ),
        )
    cycles = t.train_batch_size // t.ppo_mini_batch_size
    differences = []
    if t.ppo_epochs > 1 and cycles > 1:
        differences.append(
            f"{where}: each of its {cycles} cycles runs ppo_epochs {t.ppo_epochs} epochs over its mini-batch "
            f"before the next cycle; rlflow runs each epoch over all {cycles} mini-batches"
        )
    if t.optim.lr_warmup_steps and cycles > 1:
        differences.append(
            f"{where}: it steps the learning-rate schedule once a cycle ({cycles} a step, over total steps x "
            f"parameter_sync_step), rlflow once a step, so optim.lr_warmup_steps {t.optim.lr_warmup_steps} ends "
            f"after {t.optim.lr_warmup_steps / cycles:g} steps in verl and {t.optim.lr_warmup_steps} here"
        )
    return UpdateCycles(cycles, verl_default(root), tuple(differences))


def verl_default(root: Path) -> int | None:
    """verl's default ``parameter_sync_step``, from its trainer config under ``root``; None if unreadable."""
    import yaml

    try:
        config = yaml.safe_load((root / CONFIG).read_text())
        value = config["trainer"]["v1"]["separate_async"]["parameter_sync_step"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) else None
