"""Resources -> Ray: placement groups, fused pool workers, CPU workers and forwarders.

- ``local``: the plan's placement group (one bundle per device under PACK on one node, or one
  node-sized bundle per node under STRICT_SPREAD); one ``StageWorker`` per device
  holding every role bound to the pool; workers of a pool with several devices form a
  torch.distributed data-parallel group (rank 0's address).
- ``cpu``: ``workers`` CPU-only actors.
- ``remote``: the driver creates the backend once (it starts its own process and owns its
  GPUs), then ``forwarders`` zero-GPU actors reconnect to it by handle.

A placement group that does not become ready within ``PG_READY_TIMEOUT_S`` is removed and
reported with the pool's name: the run never waits forever for resources.

Each pool's start is a console phase (its workers up), and a local pool's model load another,
so a run says what it is waiting for and how long each took.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from rlflow.backends.remote.registry import forwarder_problem
from rlflow.errors import ConfigError, Diagnostic, ResourceError
from rlflow.runtime.cluster import Demand
from rlflow.runtime.console import QUIET, RunConsole

log = logging.getLogger("rlflow.runtime")
PG_READY_TIMEOUT_S = 60.0
SETUP_TIMEOUT_S = 600.0


@dataclass
class Pool:
    """A started resource: its workers (Ray actor handles) and what owns them."""

    name: str
    type: str
    device: str = "cpu"
    workers: list[Any] = field(default_factory=list)
    info: list[dict[str, Any]] = field(default_factory=list)
    placement_group: Any = None
    backend: Any = None  # the driver's RemoteBackend for remote resources
    roles: frozenset[str] = frozenset()

    def primary_workers(self) -> list[Any]:
        """The workers that hold the resource's state: every device of a local pool; forwarder 0 of a
        remote resource (the backend owns one copy, whichever forwarder relays)."""
        return self.workers[:1] if self.type == "remote" else self.workers

    def describe(self) -> dict[str, Any]:
        """Where this resource runs, for workers.json: its workers and, when remote, the backend (no token)."""
        described: dict[str, Any] = {"type": self.type, "device": self.device, "workers": self.info}
        if self.backend is not None:
            handle = self.backend.reconnect_handle()
            described["backend"] = {k: v for k, v in handle.items() if "token" not in k}
        return described


def resolve_device(device: str, cluster_gpus: float) -> str:
    if device == "auto":
        return "gpu" if cluster_gpus > 0 else "cpu"
    return device


def demands(plan, cluster_gpus: float) -> list[Demand]:
    out = []
    for placement in plan.resources.values():
        if placement.type == "local":
            gpu = resolve_device(placement.device, cluster_gpus) == "gpu"
            out.append(
                Demand(
                    placement.name, placement.workers, placement.cpus_per_worker, 1.0 if gpu else 0.0, placement.nnodes
                )
            )
        elif placement.type == "cpu":
            out.append(Demand(placement.name, placement.workers, placement.cpus_per_worker, 0.0))
        elif placement.type == "remote":
            out.append(Demand(placement.name, placement.forwarders, placement.cpus_per_worker, 0.0))
    return out


def start_pools(
    plan,
    pipeline_dict: dict,
    project_root: str,
    cluster_gpus: float,
    main_config_for,
    plugins: tuple[str, ...] = (),
    run_dir: str | None = None,
    console: RunConsole | None = None,
) -> dict[str, Pool]:
    """Start every resource of the plan; on any failure, stop what was started and re-raise."""
    pools: dict[str, Pool] = {}
    worker_args = (pipeline_dict, project_root, plugins, run_dir)
    console = console or RunConsole(QUIET)
    try:
        for placement in plan.resources.values():
            if placement.type == "local":
                pools[placement.name] = _start_local(placement, plan, worker_args, cluster_gpus, console)
            elif placement.type == "cpu":
                with console.phase(f"start {placement.name}") as phase:
                    pools[placement.name] = _start_cpu(placement, worker_args)
                    phase.detail = _count(placement.workers, "CPU worker")
            elif placement.type == "remote":
                with console.phase(f"start {placement.name}") as phase:
                    pools[placement.name] = _start_remote(placement, worker_args, main_config_for(placement))
                    phase.detail = f"backend {placement.backend}, {_count(placement.forwarders, 'forwarder')}"
        return pools
    except BaseException:
        stop_pools(pools)
        raise


def stop_pools(pools: dict[str, Pool]) -> None:
    """Shut workers down, destroy remote backends, free placement groups. Never raises."""
    import ray

    for pool in pools.values():
        for worker in pool.workers:
            try:
                ray.get(worker.shutdown.remote(), timeout=10)
            except Exception:  # a dead or hung worker: killing it below is all that is left to do
                pass
            ray.kill(worker, no_restart=True)
        if pool.backend is not None:
            from rlflow.backends.remote.base import destroy_backend

            try:
                destroy_backend(pool.backend)
            except Exception as exc:
                log.warning("destroying remote backend of %s failed: %s", pool.name, exc)
        if pool.placement_group is not None:
            try:
                ray.util.remove_placement_group(pool.placement_group)
            except Exception:  # already gone with the cluster
                pass
    pools.clear()


def _actor_class(num_cpus: float, num_gpus: float, strategy=None, env: dict | None = None):
    import ray

    from rlflow.runtime.worker import StageWorker

    options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_restarts": 0}
    if strategy is not None:
        options["scheduling_strategy"] = strategy
    if env:
        options["runtime_env"] = {"env_vars": env}
    return ray.remote(StageWorker).options(**options)


def _new_workers(actor_class, placement, count: int, worker_args: tuple) -> list:
    pipeline_dict, project_root, plugins, run_dir = worker_args
    return [
        actor_class(i).remote(pipeline_dict, placement.name, i, count, project_root, plugins, run_dir)
        for i in range(count)
    ]


def _start_local(placement, plan, worker_args: tuple, cluster_gpus: float, console: RunConsole) -> Pool:
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    device = resolve_device(placement.device, cluster_gpus)
    placement = placement.with_device(device)
    with console.phase(f"start {placement.name}") as phase:
        gpus = placement.gpus_per_worker
        bundles = [dict(b) for b in placement.bundles]
        pg = placement_group(bundles, strategy=placement.strategy, name=f"rlflow-{placement.name}")
        ready, _ = ray.wait([pg.ready()], timeout=PG_READY_TIMEOUT_S)
        if not ready:
            ray.util.remove_placement_group(pg)
            raise ResourceError(
                f"pool {placement.name}: its placement group ({len(bundles)} x {bundles[0]}) was not placed within "
                f"{PG_READY_TIMEOUT_S:.0f} s; the cluster lacks the resources or they are held by another job"
            )
        threads = max(1, int(placement.cpus_per_worker))
        env = (
            {"OMP_NUM_THREADS": str(threads), "DS_ACCELERATOR": "cpu"}
            if device == "cpu"
            else {"OMP_NUM_THREADS": str(threads)}
        )
        workers = _new_workers(
            lambda i: _actor_class(
                placement.cpus_per_worker,
                gpus,
                PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=placement.bundle_of[i]),
                env,
            ),
            placement,
            placement.workers,
            worker_args,
        )
        pool = Pool(
            placement.name, "local", device, workers, placement_group=pg, roles=plan.engine_roles(placement.name)
        )
        phase.detail = f"{_count(placement.workers, 'worker')} on {device}"
        dist = None
        try:
            first = ray.get([w.info.remote() for w in workers], timeout=SETUP_TIMEOUT_S)[0]
            if placement.workers > 1:
                dist = {"master_addr": first["node_ip"], "master_port": ray.get(workers[0].free_port.remote())}
        except BaseException:
            stop_pools({placement.name: pool})
            raise
    with console.phase(f"load model on {placement.name}") as phase:
        phase.detail = ", ".join(sorted(pool.roles))
        try:
            pool.info = ray.get(
                [w.setup_local.remote(device, sorted(pool.roles), dist, threads) for w in workers],
                timeout=SETUP_TIMEOUT_S,
            )
        except BaseException:
            stop_pools({placement.name: pool})
            raise
    return pool


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _start_cpu(placement, worker_args: tuple) -> Pool:
    import ray

    env = {"OMP_NUM_THREADS": str(max(1, int(placement.cpus_per_worker)))}
    workers = _new_workers(
        lambda i: _actor_class(placement.cpus_per_worker, 0, env=env), placement, placement.workers, worker_args
    )
    pool = Pool(placement.name, "cpu", "cpu", workers)
    pool.info = ray.get([w.info.remote() for w in workers], timeout=SETUP_TIMEOUT_S)
    return pool


def _start_remote(placement, worker_args: tuple, main_config: dict) -> Pool:
    import ray

    from rlflow.backends.remote.registry import create_backend

    backend = create_backend(placement.backend, main_config)
    pool = Pool(placement.name, "remote", "cpu", backend=backend)
    try:
        problem = forwarder_problem(placement.backend, backend.requires_single_forwarder(), placement.forwarders)
        if problem:
            message, _, fix = problem.rpartition(" (")
            raise ConfigError(
                [Diagnostic("", 0, 0, f"resources.{placement.name}.forwarders", message, fix.rstrip(")"))]
            )
        handle = backend.reconnect_handle()
        pool.workers = _new_workers(
            lambda i: _actor_class(placement.cpus_per_worker, 0), placement, placement.forwarders, worker_args
        )
        pool.info = ray.get(
            [w.setup_remote.remote(placement.backend, main_config, handle) for w in pool.workers],
            timeout=SETUP_TIMEOUT_S,
        )
    except BaseException:
        stop_pools({placement.name: pool})
        raise
    return pool
