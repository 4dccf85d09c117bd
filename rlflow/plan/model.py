"""The Plan: what one pipeline runs, in which order, where, and which data flows between stages.

The contract between the compiler and what consumes it (the runtime, the renderers): frozen, pure data.
Design notes: docs/design/plan.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from rlflow.schemas.model_roles import checkpointed, models_of
from rlflow.stages.base import Cadence

EntryCadence = Literal[Cadence, "init", "resume"]
ResourceType = Literal["local", "cpu", "remote", "driver"]
Strategy = Literal["PACK", "SPREAD", "STRICT_SPREAD"]

ASYNC_MODES = ("separate_async",)  # trainer modes whose rollout runs ahead of the trainer
ROLLOUT_WEIGHTS = "rollout_weights"  # the field the weight edge carries back to the rollout
RESUME = "load_checkpoint"  # the runtime's resume phase in the init phase (role "resume")
DATA_SOURCE = "<data>"  # the data loader in edges; "<" keeps it apart from any stage name


class FrozenDict(dict):
    """A dict that refuses changes. Unlike ``MappingProxyType`` it pickles (plans travel to Ray
    actors) and is a ``dict`` to JSON and pydantic."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a compiled plan is read-only")

    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self):
        return (FrozenDict, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=repr)))


def frozen_mapping(value: Mapping[str, Any] | None) -> FrozenDict:
    """A read-only copy of ``value``; nested dicts are frozen too."""
    return FrozenDict({k: frozen_mapping(v) if isinstance(v, Mapping) else v for k, v in (value or {}).items()})


@dataclass(frozen=True)
class PlanStage:
    """One entry of a phase: a stage bound to a resource, with the fields it reads and writes."""

    name: str
    kind: str
    role: str  # the kind's role (rlflow.stages.base.Role), or "resume" for the runtime's resume phase
    verl_timer: str | None
    resource: str
    resource_type: ResourceType
    dispatch: str  # "shard" (split rows over the workers), "all" (every worker), "driver" (whole batch once)
    cadence: EntryCadence
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    timeout_s: float
    config: Mapping[str, Any] = field(default_factory=FrozenDict)
    implicit: bool = False  # added by the compiler, not declared in the pipeline
    engine_roles: frozenset[str] = frozenset()  # engine roles its worker needs (rollout, actor, ref)
    changes_rows: bool = False  # its output replaces the batch (generate expands, filters drop)
    sampling: Mapping[str, Any] = field(default_factory=FrozenDict)  # the rollout's, for kinds that need it


@dataclass(frozen=True)
class Placement:
    """A resource as the runtime reserves it.

    ``bundles`` holds one Ray placement-group bundle per worker (local and cpu pools) or per
    forwarder (remote; CPU only, the backend owns its GPUs). ``stages`` names the stages
    colocated on it (step stages in order, then init-only ones); the runtime fuses them into
    one actor per worker, as verl does.
    """

    name: str
    type: ResourceType
    device: str  # "cpu", "gpu" or "auto" for local pools; "cpu" otherwise
    workers: int
    nnodes: int
    bundles: tuple[Mapping[str, float], ...]
    strategy: Strategy
    cpus_per_worker: float
    gpus_per_worker: float
    backend: str | None = None
    backend_config: Mapping[str, Any] = field(default_factory=FrozenDict)
    forwarders: int = 0
    stages: tuple[str, ...] = ()
    bundle_of: tuple[int, ...] = ()  # the bundle index of each worker (several share a node-sized bundle)
    resources: Mapping[str, float] = field(default_factory=FrozenDict)  # custom Ray resources per worker
    label_selector: Mapping[str, str] = field(default_factory=FrozenDict)  # the nodes every bundle may use

    def with_device(self, device: Literal["cpu", "gpu"]) -> Placement:
        """This placement with ``device: auto`` resolved (only local pools carry a device choice)."""
        if self.type != "local" or self.device == device:
            return self
        gpus = 1.0 if device == "gpu" else 0.0
        bundles, bundle_of = local_bundles(self.workers, self.cpus_per_worker, gpus, self.nnodes, self.resources)
        return replace(self, device=device, gpus_per_worker=gpus, bundles=bundles, bundle_of=bundle_of)


def local_bundles(
    workers: int, cpus: float, gpus: float, nnodes: int = 1, custom: Mapping[str, float] | None = None
) -> tuple[tuple[Mapping[str, float], ...], tuple[int, ...]]:
    """Bundles of a pool and each worker's bundle index; ``custom``: each worker's custom Ray resources.

    One node: one bundle per worker (placed with PACK). Several nodes: one node-sized bundle per
    node holding that node's ``workers // nnodes`` workers (placed with STRICT_SPREAD, so each
    bundle lands on its own node); Ray lets several actors share a bundle when their resources fit.
    """
    per_node = workers // nnodes
    size = 1 if nnodes == 1 else per_node
    bundle = {"CPU": float(cpus * size), **({"GPU": float(gpus * size)} if gpus else {})}
    bundle.update({name: float(amount * size) for name, amount in (custom or {}).items()})
    count = workers if nnodes == 1 else nnodes
    return tuple(FrozenDict(bundle) for _ in range(count)), tuple(r // size for r in range(workers))


@dataclass(frozen=True)
class Edge:
    """Fields flowing from ``src`` to ``dst``. ``loop`` marks state carried into the next step."""

    src: str
    dst: str
    fields: tuple[str, ...]
    loop: bool = False

    @property
    def weights_only(self) -> bool:
        """The weight edge: the rollout's weights carried into the next step (relaxed in an async mode)."""
        return self.loop and set(self.fields) <= {ROLLOUT_WEIGHTS}


@dataclass(frozen=True)
class Staleness:
    """How far the rollout may run ahead of the trainer (verl's ``trainer.v1.sampler.*`` and
    ``trainer.v1.separate_async.num_warmup_batches``)."""

    max_off_policy_threshold: int | None  # most policy versions a batch may span, inclusive; None: unbounded
    max_off_policy_strategy: str  # "drop" or "wait"
    num_warmup_batches: int  # batches sampled ahead of the trainer

    def describe(self) -> str:
        """``weights, up to 1 version behind``: how the rollout's weights may lag the actor's."""
        if self.max_off_policy_threshold is None:
            return "weights, any number of versions behind"
        behind = self.max_off_policy_threshold - 1  # a batch spanning N versions was sampled N - 1 behind
        if behind == 0:
            return "weights, never behind (a threshold of 1 leaves nothing to sample ahead)"
        return f"weights, up to {behind} version{'' if behind == 1 else 's'} behind"


@dataclass(frozen=True)
class Plan:
    """A compiled pipeline: the init phase, the per-step stages in order, resources and data edges."""

    pipeline_name: str
    init: tuple[PlanStage, ...]
    step: tuple[PlanStage, ...]
    resources: Mapping[str, Placement]
    edges: tuple[Edge, ...]
    trainer_mode: str = "sync"  # verl's trainer.v1.trainer_mode
    waits: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (stage, the earlier stages of its step it waits for)
    groups: tuple[tuple[str, ...], ...] = ()  # the step in levels: a group's stages read nothing from each other
    overlap: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (stage of step t+1, stages of step t it may run beside)
    staleness: Staleness | None = None  # the bound of an async mode; None in sync mode
    refill: tuple[str, ...] = ()  # step stages repeated until the batch is full (algorithm.filter_groups)

    def stage(self, name: str) -> PlanStage:
        """The step entry named ``name`` (else the init entry)."""
        for entry in (*self.step, *self.init):
            if entry.name == name:
                return entry
        raise KeyError(f"plan of {self.pipeline_name!r} has no stage {name!r}")

    def stage_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.step)

    def with_role(self, role: str) -> tuple[PlanStage, ...]:
        """The step entries of ``role``, in step order."""
        return tuple(s for s in self.step if s.role == role)

    def first_with_role(self, role: str) -> PlanStage | None:
        found = self.with_role(role)
        return found[0] if found else None

    def engine_roles(self, resource: str) -> frozenset[str]:
        """The engine roles the workers of ``resource`` need: the union over the stages bound to it."""
        return frozenset().union(*(s.engine_roles for s in (*self.init, *self.step) if s.resource == resource))

    def models(self, resource: str) -> tuple[str, ...]:
        """The declared models the workers of ``resource`` load (``model``, ``critic``): several when colocated."""
        return models_of(self.engine_roles(resource))

    def on_every_checkpointed_pool(self, stage: PlanStage) -> tuple[PlanStage, ...]:
        """``stage`` (a checkpoint save or the resume), then the same on every other pool holding a model whose
        state a checkpoint keeps (a critic on a pool of its own): each writes or reads its own part."""
        others = [r for r in self.resources if r != stage.resource and checkpointed(self.engine_roles(r))]
        return (stage, *(replace(stage, resource=r, resource_type=self.resources[r].type, engine_roles=frozenset())
                         for r in others))  # fmt: skip

    def loop_edges(self) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.loop)

    @property
    def is_async(self) -> bool:
        return self.trainer_mode in ASYNC_MODES

    def staleness_edges(self) -> tuple[Edge, ...]:
        """The weight edges the rollout may run ahead of (async modes; none in sync mode)."""
        return tuple(e for e in self.edges if e.weights_only) if self.is_async else ()

    def lanes(self) -> dict[str, tuple[str, ...]]:
        """Async modes: resource -> its step stages, the rollout's resource first (the rollout lane), then the
        trainer lane (the update's resource), then the others; empty in sync mode."""
        if not self.is_async:
            return {}
        first = [s.resource for s in (self.first_with_role("rollout"), self.first_with_role("update")) if s]
        order = dict.fromkeys([*first, *(s.resource for s in self.step)])
        return {r: tuple(s.name for s in self.step if s.resource == r) for r in order}
