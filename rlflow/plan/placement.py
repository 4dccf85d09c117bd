"""Resource specs -> Placements: the bundles and strategy the runtime asks Ray for.

Design notes: docs/design/plan.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rlflow.plan.model import Placement, PlanStage, frozen_mapping, local_bundles
from rlflow.schemas.pipeline import DRIVER, CpuPool, LocalPool, Pipeline, RemotePool, data_parallel_size


def build_placements(spec: Pipeline, entries: Iterable[PlanStage]) -> Mapping[str, Placement]:
    """One Placement per declared resource a stage runs on (in declaration order; one no stage uses is not
    started), plus the driver when a stage uses it."""
    colocated: dict[str, dict[str, None]] = {}  # resource -> stage names, ordered, once each
    for entry in entries:
        colocated.setdefault(entry.resource, {})[entry.name] = None
    placements = {
        name: _placement(name, resource, tuple(colocated[name]))
        for name, resource in spec.resources.items()
        if name in colocated
    }
    if DRIVER in colocated:
        placements[DRIVER] = Placement(
            name=DRIVER, type="driver", device="cpu", workers=1, nnodes=1, bundles=(), strategy="PACK",
            cpus_per_worker=0.0, gpus_per_worker=0.0, stages=tuple(colocated[DRIVER]),
        )  # fmt: skip
    return frozen_mapping(placements)


def _placement(name: str, resource: LocalPool | CpuPool | RemotePool, stages: tuple[str, ...]) -> Placement:
    pinned = {
        "resources": frozen_mapping(resource.resources),
        "label_selector": frozen_mapping(resource.label_selector),
    }
    custom = resource.resources
    if isinstance(resource, LocalPool):
        workers = data_parallel_size(resource)
        gpus = 1.0 if resource.device == "gpu" else 0.0
        bundles, bundle_of = local_bundles(workers, resource.cpus_per_worker, gpus, resource.nnodes, custom)
        return Placement(
            name=name, type="local", device=resource.device, workers=workers, nnodes=resource.nnodes,
            bundles=bundles, bundle_of=bundle_of, strategy="PACK" if resource.nnodes == 1 else "STRICT_SPREAD",
            cpus_per_worker=resource.cpus_per_worker, gpus_per_worker=gpus, stages=stages, **pinned,
        )  # fmt: skip
    if isinstance(resource, CpuPool):
        return Placement(
            name=name, type="cpu", device="cpu", workers=resource.workers, nnodes=1,
            bundles=local_bundles(resource.workers, resource.cpus_per_worker, 0.0, 1, custom)[0], strategy="PACK",
            cpus_per_worker=resource.cpus_per_worker, gpus_per_worker=0.0, stages=stages, **pinned,
        )  # fmt: skip
    return Placement(
        name=name, type="remote", device="cpu", workers=resource.forwarders, nnodes=1,
        bundles=local_bundles(resource.forwarders, resource.cpus_per_forwarder, 0.0, 1, custom)[0], strategy="PACK",
        cpus_per_worker=resource.cpus_per_forwarder, gpus_per_worker=0.0, backend=resource.backend,
        backend_config=frozen_mapping(resource.config), forwarders=resource.forwarders, stages=stages, **pinned,
    )  # fmt: skip
