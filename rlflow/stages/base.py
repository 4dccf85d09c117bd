"""What a stage kind is: its role, config model, the batch fields it reads and writes, and ``run``.

A stage kind is a class whose metadata is pure Python, so validation and plan compilation never import torch.
The planner, the validator and the step loop find stages by ``role``, never by kind name.
Design notes: docs/design/stage_kinds.md.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from rlflow.batch import Batch
    from rlflow.schemas.pipeline import Pipeline, StageSpec

# Loop-carried state fields: produced in one step, consumed in the next (or at init).
STATE_FIELDS = frozenset({"actor_weights", "rollout_weights", "critic_weights"})
# The sampling settings a rollout kind declares (``StageKind.sampling``) and validation replaces.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "do_sample", "n")
# Fields the data loader puts in every step's batch before the first stage.
SOURCE_FIELDS = ("prompts", "prompt_mask", "uid", "data_source", "raw_prompt", "reward_info")

Role = Literal[
    "rollout",
    "reward",
    "reward_model",
    "teacher",
    "balance",
    "log_prob",
    "reference",
    "values",
    "advantage",
    "critic_update",
    "filter",
    "update",
    "checkpoint",
    "weight_sync",
    "validation",
    "transform",
]
Dispatch = Literal["shard", "all", "driver"]
Cadence = Literal["every_step", "save_freq", "test_freq"]


def due(cadence: Cadence, trainer: Any, step: int, last: int) -> bool:
    """Whether a stage of ``cadence`` runs at ``step`` of a run whose last step is ``last``.

    ``save_freq`` and ``test_freq`` name the trainer knob (``trainer.save_freq``, ...): the stage
    runs every that many steps and at the last step, never when the knob is 0 or less (verl's rule).
    """
    if cadence == "every_step":
        return True
    freq = getattr(trainer, cadence)
    return freq > 0 and (step % freq == 0 or step == last)


# verl's timer names in PPOTrainerSync's order; the compiler breaks ties by this order.
VERL_ORDER = (
    "gen",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
    "save_checkpoint",
    "update_weights",
    "testing",
)


class StageConfig(BaseModel):
    """Base of every stage kind's ``with:`` model: strict and frozen like the pipeline."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoConfig(StageConfig):
    """For stage kinds that take no ``with:`` settings."""


@dataclass
class StageContext:
    """What a running stage may use. Built by the runtime (or a test) on the worker that runs it."""

    pipeline: Pipeline
    config: StageConfig
    stage_name: str
    step: int = 0
    rank: int = 0
    world_size: int = 1
    engine: Any = None  # a backend engine (rlflow.backends.engine.Engine) on local/remote resources
    run_dir: str | None = None
    reads: tuple[str, ...] = ()  # the plan's reads of this stage under this pipeline
    checkpoint_dir: str | None = None  # where a checkpoint stage writes (set by the runtime)
    project_root: str | None = None  # the folder of rlflow.yaml: relative paths in ``with:`` start there
    state: dict[str, Any] = field(default_factory=dict)  # per-worker cache that lives across steps
    # what the worker closes when it shuts down: a stage that holds a process (a reward function's) in
    # ``state`` registers its close here, so the process ends with the run even when Ray then kills the worker
    at_shutdown: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    sampling: dict[str, Any] = field(default_factory=dict)  # the rollout's, for kinds with needs_sampling

    def inputs(self, batch: Batch) -> Batch:
        """The data fields of ``batch`` this stage reads (state fields never travel in a batch)."""
        return batch.select(f for f in self.reads if f not in STATE_FIELDS)


class StageKind:
    """Base class of stage kinds. Subclasses set the ClassVars and implement ``run``."""

    name: ClassVar[str]
    role: ClassVar[Role] = "transform"
    engine_roles: ClassVar[frozenset[str]] = frozenset()
    config_model: ClassVar[type[StageConfig]] = NoConfig
    verl_timer: ClassVar[str | None] = None  # verl's timer name, emitted as timing_s/<verl_timer>
    reads_fields: ClassVar[tuple[str, ...]] = ()
    writes_fields: ClassVar[tuple[str, ...]] = ()
    allowed_on: ClassVar[frozenset[str]] = frozenset({"local", "remote"})
    dispatch: ClassVar[Dispatch] = "shard"
    cadence: ClassVar[Cadence] = "every_step"
    # True when run() returns a batch with other rows than it got (generate expands, filters drop):
    # the runtime then sends every field and takes the returned batch whole.
    changes_rows: ClassVar[bool] = False
    # False: run() reads and writes numpy arrays, never torch (see the module's docstring)
    uses_torch: ClassVar[bool] = True
    # True: the plan hands run() the rollout's sampling settings (ctx.sampling), whichever kind the rollout is
    needs_sampling: ClassVar[bool] = False
    description: ClassVar[str] = ""

    @classmethod
    def reads(cls, pipeline: Pipeline, stage: StageSpec) -> tuple[str, ...]:
        """Fields this stage reads under this pipeline (some depend on the algorithm)."""
        return cls.reads_fields

    @classmethod
    def writes(cls, pipeline: Pipeline, stage: StageSpec) -> tuple[str, ...]:
        return cls.writes_fields

    @classmethod
    def parse_config(cls, raw: dict[str, Any]) -> StageConfig:
        return cls.config_model.model_validate(raw)

    @classmethod
    def sampling(cls, pipeline: Pipeline, stage: StageSpec) -> dict[str, Any]:
        """A rollout kind's sampling settings (of ``SAMPLING_KEYS``), which the plan resolves once and hands
        to the stages that score its samples. Default: the fields of its ``with:`` model of those names."""
        config = cls.parse_config(stage.with_)
        return {key: getattr(config, key) for key in SAMPLING_KEYS if key in type(config).model_fields}

    @classmethod
    def with_sampling(cls, config: dict[str, Any], sampling: dict[str, Any]) -> dict[str, Any]:
        """A rollout kind's ``config`` with other ``sampling`` (validation's) in place of its own."""
        return {**config, **{k: v for k, v in sampling.items() if k in cls.config_model.model_fields}}

    @classmethod
    def check(cls, pipeline: Pipeline, stage: StageSpec) -> list[tuple[str, ...]]:
        """Extra semantic rules: a list of (dotted path under the stage, message[, how to fix it])."""
        return []

    @classmethod
    def check_in_project(cls, pipeline: Pipeline, stage: StageSpec, project_root: Path) -> list[tuple[str, ...]]:
        """``check`` for kinds whose rules need the project root (files named in ``with:``); default: ``check``."""
        return cls.check(pipeline, stage)

    def run(self, batch: Batch, ctx: StageContext) -> Batch:  # pragma: no cover - abstract
        raise NotImplementedError(f"stage kind {self.name!r} does not implement run()")


def logprob_temperature(sampling: dict[str, Any]) -> float:
    """The temperature log-probs are taken at: the rollout's, as verl does, so the PPO ratio compares the
    policy with the distribution actually sampled; 1.0 for a greedy (temperature 0) or unknown rollout."""
    temperature = sampling.get("temperature", 1.0)
    return temperature if temperature and temperature > 0 else 1.0
