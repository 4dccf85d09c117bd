"""``StageWorker``: the one worker class behind every resource, under Ray or in-process.

A ``local`` pool's worker holds the fused local engine, a ``cpu`` pool's holds none, a ``remote`` resource's is
a forwarder. Design notes: docs/design/worker.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlflow.batch import Batch
from rlflow.registry import import_plugins
from rlflow.runtime.limits import limit_address_space
from rlflow.runtime.memory import trim_heap
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages import StageContext, get_stage_kind


@dataclass(frozen=True)
class StageCall:
    """One stage execution as a worker receives it."""

    stage: str
    kind: str
    config: dict[str, Any]
    step: int
    reads: tuple[str, ...] = ()
    checkpoint_dir: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)  # the rollout's, handed by the plan


@dataclass
class WorkerResult:
    """What a worker call returns: the output (a batch, or an engine call's result) and its timing."""

    batch: Batch
    start: float
    end: float
    pid: int
    value: Any = None
    warnings: list[str] = field(default_factory=list)  # what rlflow's loggers warned of during the call


MAX_RELAYED = 20  # warnings one stage call hands back (each kind is logged once anyway)


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.into) < MAX_RELAYED:
            self.into.append(record.getMessage())


@contextlib.contextmanager
def collected_warnings() -> Iterator[list[str]]:
    """The warnings logged under ``rlflow`` while the block runs (they are still logged here as well)."""
    into: list[str] = []
    handler, logger = _Collect(into), logging.getLogger("rlflow")
    logger.addHandler(handler)
    try:
        yield into
    finally:
        logger.removeHandler(handler)


class StageWorker:
    """Runs stages of one resource on one worker (rank) of it."""

    def __init__(
        self,
        pipeline: dict,
        resource: str,
        rank: int,
        world_size: int,
        project_root: str,
        plugins: tuple[str, ...] = (),
        run_dir: str | None = None,
        process_env: dict[str, str] | None = None,
    ) -> None:
        # A Ray worker's process is its own: set what its libraries read at load (torch's threads) here,
        # before they load, rather than through a runtime_env, which would keep Ray from reusing the
        # Python workers it has already started.
        os.environ.update(process_env or {})
        import_plugins(plugins, project_root)  # plugin stage kinds and backends must be known in this process too
        self.pipeline = Pipeline.model_validate(pipeline)
        self.resource = resource
        spec = self.pipeline.resources.get(resource)
        if spec is not None and spec.type == "cpu":
            limit_address_space(spec.max_address_space_mb)
        self.rank = rank
        self.world_size = world_size
        self.project_root = Path(project_root)
        self.run_dir = run_dir
        self.engine: Any = None
        self.state: dict[str, Any] = {}
        self.at_shutdown = contextlib.ExitStack()  # the stages' processes, closed by ``shutdown``

    # ---- set-up -------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """Where this worker runs, and ``ready_at``: the wall-clock moment it answered (a start-up phase's end)."""
        return {
            "ready_at": time.time(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "node_ip": _node_ip(),
            "node_id": _node_id(),
            "rank": self.rank,
            "resource": self.resource,
        }

    def free_port(self) -> int:
        with socket.socket() as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def setup_local(self, device: str, roles: list[str], dist: dict | None, threads: int | None) -> dict[str, Any]:
        """Build the fused local engine (imports torch/transformers here, not at worker creation)."""
        import torch

        from rlflow.backends.local.factory import create_local_engine
        from rlflow.check.engines import engine_choice

        if threads:
            torch.set_num_threads(threads)
        self.engine = create_local_engine(
            self.pipeline,
            engine_choice(self.pipeline),
            device=device,
            rank=self.rank,
            world_size=self.world_size,
            roles=frozenset(roles),
            project_root=self.project_root,
            dist=dist,
            run_dir=self.run_dir,
        )
        trim_heap()  # what loading freed (checkpoint buffers, the reference's copy) goes back to the system
        return self.info()

    def setup_remote(self, backend: str, main_config: dict, handle: dict) -> dict[str, Any]:
        """Forwarder: reconnect to the backend the driver started (starts nothing)."""
        from rlflow.backends.remote.registry import connect_backend

        self.engine = connect_backend(backend, main_config, handle)
        return self.info()

    # ---- work ---------------------------------------------------------------------------
    def run_stage(self, call: StageCall, batch: Batch | None) -> WorkerResult:
        kind = get_stage_kind(call.kind)
        ctx = StageContext(
            pipeline=self.pipeline,
            config=kind.parse_config(call.config),
            stage_name=call.stage,
            step=call.step,
            rank=self.rank,
            world_size=self.world_size,
            engine=self.engine,
            run_dir=self.run_dir,
            reads=call.reads,
            checkpoint_dir=call.checkpoint_dir,
            project_root=str(self.project_root),
            state=self.state,
            sampling=call.sampling,
            at_shutdown=self.at_shutdown,
        )
        start = time.time()
        with collected_warnings() as warnings:
            out = kind().run(Batch() if batch is None else batch, ctx)
        trim_heap()  # what the stage freed (a rollout's KV cache, activations) goes back before the next one
        return WorkerResult(out, start, time.time(), os.getpid(), warnings=warnings)

    def load_checkpoint(self, path: str) -> WorkerResult:
        return self._timed(self.engine.load_checkpoint, path)

    def set_global_steps(self, step: int) -> WorkerResult:
        return self._timed(self.engine.set_global_steps, step)

    def export_weights(self) -> WorkerResult:
        """Actor side of a cross-pool sync (in-process: the tensors themselves)."""
        return self._timed(self.engine.export_weights)

    def load_weights(self, weights: Any, step: int) -> WorkerResult:
        """Rollout side of a cross-pool sync: the weights of policy version ``step``; ``sync/*`` metrics."""
        return self._timed(self.engine.load_rollout_weights, weights, step)

    def export_weights_ref(self) -> WorkerResult:
        """Actor side under Ray: the weights go into the object store once, not via the driver."""
        import ray

        return self._timed(lambda: [ray.put(self.engine.export_weights())])

    def load_weights_from(self, exported: WorkerResult, step: int) -> WorkerResult:
        """Rollout side under Ray: ``exported`` is the actor's ``export_weights_ref`` result, whose value
        wraps the weights' ObjectRef (so Ray hands this call the small result, then the weights once)."""
        import ray

        return self._timed(lambda: self.engine.load_rollout_weights(ray.get(exported.value[0]), step))

    def shutdown(self) -> None:
        """Close what the stages hold (reward processes and their descendants), then the engine."""
        try:
            self.at_shutdown.close()
        finally:
            if self.engine is not None:
                self.engine.close()

    @staticmethod
    def _timed(fn, *args: Any) -> WorkerResult:
        start = time.time()
        value = fn(*args)
        return WorkerResult(Batch(), start, time.time(), os.getpid(), value)


def _in_ray() -> bool:
    """Whether this process is a Ray worker (asking Ray anything else outside one would start Ray)."""
    import sys

    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def _node_id() -> str:
    if not _in_ray():  # the in-process executor
        return "local"
    import ray

    return ray.get_runtime_context().get_node_id()


def _node_ip() -> str:
    if not _in_ray():  # the in-process executor: the hostname is good enough
        return socket.gethostname()
    import ray

    return ray.util.get_node_ip_address()
