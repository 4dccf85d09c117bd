"""Resources -> Ray: placement groups, fused pool workers, CPU workers and forwarders.

Every pool reserves its bundles first (``rlflow.runtime.reserve``) and the pools start side by side; a run never
waits forever for resources. Design notes: docs/design/pools.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlflow.backends.remote.registry import forwarder_problem
from rlflow.errors import ConfigError, Diagnostic, ResourceError
from rlflow.runtime.console import QUIET, RunConsole
from rlflow.runtime.fit import Demand
from rlflow.runtime.reserve import reserve

log = logging.getLogger("rlflow.runtime")
SETUP_TIMEOUT_S = 600.0
PLACEMENT_TIMEOUT_S = 60.0  # rlflow.yaml's ray.placement_timeout_s when it sets none


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
    """What each pool of the plan reserves, its device resolved for a cluster with ``cluster_gpus``."""
    return [
        demand_of(placement.with_device(resolve_device(placement.device, cluster_gpus)))
        for placement in plan.resources.values()
        if placement.type in ("local", "cpu", "remote")
    ]


def demand_of(placement) -> Demand:
    """What one placement (its device resolved) reserves, for the fit check and the messages."""
    return Demand(
        placement.name,
        placement.workers,
        placement.cpus_per_worker,
        placement.gpus_per_worker,
        placement.nnodes,
        per_worker=placement.type != "local",
        resources=dict(placement.resources),
        label_selector=dict(placement.label_selector),
    )


def start_pools(
    plan,
    pipeline_dict: dict,
    project_root: str,
    cluster_gpus: float,
    main_config_for,
    plugins: tuple[str, ...] = (),
    run_dir: str | None = None,
    console: RunConsole | None = None,
    meanwhile: Callable[[], None] | None = None,
    placement_timeout_s: float = PLACEMENT_TIMEOUT_S,
) -> dict[str, Pool]:
    """Start every resource of the plan, side by side; on any failure, stop what was started and re-raise.

    Every local and CPU pool's workers are created at once (each pool's placement group placed
    first, within ``placement_timeout_s``); while they start, ``meanwhile`` runs here (the driver's
    own start-up work: importing torch) and remote resources start; then each pool is waited for,
    and the local pools load their models together.
    """
    pools: dict[str, Pool] = {}
    worker_args = (pipeline_dict, project_root, plugins, run_dir)
    console = console or RunConsole(QUIET)
    try:
        starting = [
            _create_local(placement, plan, worker_args, cluster_gpus, pools, placement_timeout_s)
            if placement.type == "local"
            else _create_cpu(placement, worker_args, pools, placement_timeout_s)
            for placement in plan.resources.values()
            if placement.type in ("local", "cpu")
        ]
        if meanwhile is not None:
            meanwhile()
        for placement in plan.resources.values():
            if placement.type == "remote":
                with console.phase(f"start {placement.name}") as phase:
                    pools[placement.name] = _start_remote(
                        placement, worker_args, main_config_for(placement), placement_timeout_s
                    )
                    phase.detail = f"backend {placement.backend}, {_count(placement.forwarders, 'forwarder')}"
        loading = [_await_workers(start, console) for start in starting]
        for load in loading:
            if load is not None:
                _await_model(load, console)
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


def _actor_class(placement, pg, index: int):
    """``StageWorker`` as a Ray actor in bundle ``index`` of ``pg``, holding its share of the bundle; no
    runtime_env (the worker sets its own environment), so Ray may hand it one of the Python workers it
    started ahead of time instead of starting a new process."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rlflow.runtime.worker import StageWorker

    return ray.remote(StageWorker).options(
        num_cpus=placement.cpus_per_worker,
        num_gpus=placement.gpus_per_worker,
        resources=dict(placement.resources),
        max_restarts=0,
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index),
    )


def _new_workers(placement, pg, count: int, worker_args: tuple, env: dict | None = None) -> list:
    """``count`` workers of ``placement``, each in its bundle of ``pg`` (several share a node-sized one)."""
    pipeline_dict, project_root, plugins, run_dir = worker_args
    bundle_of = placement.bundle_of or range(count)
    return [
        _actor_class(placement, pg, bundle_of[i]).remote(
            pipeline_dict, placement.name, i, count, project_root, plugins, run_dir, env
        )
        for i in range(count)
    ]


@dataclass
class _Starting:
    """A pool whose workers were created and not yet waited for (``since``: when its start began)."""

    pool: Pool
    since: float
    detail: str
    answers: list  # each worker's info(), asked as it was created: answered as soon as the worker is up
    threads: int = 1
    loading: list | None = None  # the model load, when it could be queued right behind info()


@dataclass
class _Loading:
    """A local pool's model load under way: the calls, and when they were sent."""

    pool: Pool
    refs: list
    since: float


def _create_local(
    placement, plan, worker_args: tuple, cluster_gpus: float, pools: dict[str, Pool], timeout_s: float
) -> _Starting:
    """Place the pool's placement group and create its workers (not waited for)."""
    since = time.time()
    device = resolve_device(placement.device, cluster_gpus)
    placement = placement.with_device(device)
    pg = reserve(placement, demand_of(placement), timeout_s)
    threads = max(1, int(placement.cpus_per_worker))
    env = {"OMP_NUM_THREADS": str(threads), **({"DS_ACCELERATOR": "cpu"} if device == "cpu" else {})}
    pool = Pool(placement.name, "local", device, placement_group=pg, roles=plan.engine_roles(placement.name))
    pools[placement.name] = pool
    pool.workers = _new_workers(placement, pg, placement.workers, worker_args, env)
    start = _Starting(pool, since, f"{_count(placement.workers, 'worker')} on {device}", _ask_info(pool), threads)
    if placement.workers == 1:  # no process group to set up first: the model loads as soon as the worker is up
        start.loading = _load_model(pool, None, threads)
    return start


def _create_cpu(placement, worker_args: tuple, pools: dict[str, Pool], timeout_s: float) -> _Starting:
    since = time.time()
    env = {"OMP_NUM_THREADS": str(max(1, int(placement.cpus_per_worker)))}
    pool = Pool(placement.name, "cpu", "cpu", placement_group=reserve(placement, demand_of(placement), timeout_s))
    pools[placement.name] = pool
    pool.workers = _new_workers(placement, pool.placement_group, placement.workers, worker_args, env)
    return _Starting(pool, since, _count(placement.workers, "CPU worker"), _ask_info(pool))


def _ask_info(pool: Pool) -> list:
    return [w.info.remote() for w in pool.workers]


def _load_model(pool: Pool, dist: dict | None, threads: int) -> list:
    return [w.setup_local.remote(pool.device, sorted(pool.roles), dist, threads) for w in pool.workers]


def _await_workers(start: _Starting, console: RunConsole) -> _Loading | None:
    """Wait for a created pool's workers (the phase ends when the last one answered); a local pool's
    model load, sent now unless it was queued at creation, is returned to be waited for."""
    import ray

    pool = start.pool
    with console.phase(f"start {pool.name}", since=start.since) as phase:
        pool.info = _answers(start.answers, pool, "start")
        phase.end = max(i["ready_at"] for i in pool.info)
        phase.detail = start.detail
    if pool.type != "local":
        return None
    if start.loading is not None:  # queued behind info(): it began when the worker was up
        return _Loading(pool, start.loading, phase.end)
    first = pool.info[0]  # rank 0 holds the data-parallel group's rendezvous
    dist = {"master_addr": first["node_ip"], "master_port": ray.get(pool.workers[0].free_port.remote())}
    return _Loading(pool, _load_model(pool, dist, start.threads), time.time())


def _await_model(load: _Loading, console: RunConsole) -> None:
    with console.phase(f"load model on {load.pool.name}", since=load.since) as phase:
        phase.detail = ", ".join(sorted(load.pool.roles))
        load.pool.info = _answers(load.refs, load.pool, "load the model")
        phase.end = max(i["ready_at"] for i in load.pool.info)


def _answers(refs: list, pool: Pool, what: str) -> list:
    """The workers' answers to a set-up call, within ``SETUP_TIMEOUT_S``; else one line naming the late ones."""
    import ray

    _, late = ray.wait(refs, num_returns=len(refs), timeout=SETUP_TIMEOUT_S)
    if late:
        who = ", ".join(str(i) for i, ref in enumerate(refs) if ref in late)
        raise ResourceError(
            f"pool {pool.name}: worker(s) {who} did not {what} within {SETUP_TIMEOUT_S:g} s (their node is "
            "overloaded or short of memory, or their process hangs: see the worker logs in the Ray session's "
            "logs folder, /tmp/ray/session_latest/logs by default)"
        )
    return ray.get(refs)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _start_remote(placement, worker_args: tuple, main_config: dict, timeout_s: float) -> Pool:
    from rlflow.backends.remote.registry import create_backend

    # the forwarders' room first: a resource the cluster cannot hold starts no backend
    pool = Pool(placement.name, "remote", "cpu", placement_group=reserve(placement, demand_of(placement), timeout_s))
    try:
        backend = pool.backend = create_backend(placement.backend, main_config)
        problem = forwarder_problem(placement.backend, backend.requires_single_forwarder(), placement.forwarders)
        if problem:
            message, _, fix = problem.rpartition(" (")
            raise ConfigError(
                [Diagnostic("", 0, 0, f"resources.{placement.name}.forwarders", message, fix.rstrip(")"))]
            )
        handle = backend.reconnect_handle()
        pool.workers = _new_workers(placement, pool.placement_group, placement.forwarders, worker_args)
        pool.info = _answers(
            [w.setup_remote.remote(placement.backend, main_config, handle) for w in pool.workers], pool, "connect"
        )
    except BaseException:
        stop_pools({placement.name: pool})
        raise
    return pool
