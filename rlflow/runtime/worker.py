"""``StageWorker``: the one Ray actor class behind every resource.

- a ``local`` pool has one worker per device, holding a ``LocalEngine`` with every role
  bound to that pool (rollout, actor, reference) fused in one process, as verl does;
- a ``cpu`` pool's workers hold no engine: they run CPU stages (reward, filters);
- a ``remote`` resource's workers are forwarders: zero GPUs, their engine is a client of the
  out-of-process backend, rebuilt from the driver's reconnect handle.

Stages run here through ``run_stage``; each call returns its output fields together with
start/end wall-clock times and the pid, which become a ``trace.jsonl`` record.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from rlflow.batch import Batch
from rlflow.registry import import_plugins
from rlflow.runtime.limits import limit_address_space
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages import get_stage_kind
from rlflow.stages.base import StageContext


class StageWorker:
    """Runs stages of one resource on one worker (rank) of it."""

    def __init__(self, pipeline: dict, resource: str, rank: int, world_size: int, project_root: str,
                 plugins: tuple[str, ...] = ()) -> None:
        import_plugins(plugins)  # plugin stage kinds and backends must be known in this process too
        self.pipeline = Pipeline.model_validate(pipeline)
        self.resource = resource
        spec = self.pipeline.resources.get(resource)
        if spec is not None and spec.type == "cpu":
            limit_address_space(spec.max_address_space_mb)
        self.rank = rank
        self.world_size = world_size
        self.project_root = Path(project_root)
        self.engine: Any = None
        self.state: dict[str, Any] = {}
        self.run_dir: str | None = None

    # ---- set-up -------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname(), "node_ip": _node_ip(), "node_id": _node_id(),
                "rank": self.rank, "resource": self.resource}

    def free_port(self) -> int:
        with socket.socket() as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def setup_local(self, device: str, roles: list[str], dist: dict | None, threads: int | None) -> dict[str, Any]:
        """Build the fused local engine (imports torch/transformers here, not at actor creation)."""
        import torch

        if threads:
            torch.set_num_threads(threads)
        from rlflow.backends.local.engines import create_local_engine  # LocalEngine, or DeepSpeed/vLLM as configured

        self.engine = create_local_engine(
            self.pipeline, device=device, rank=self.rank, world_size=self.world_size,
            roles=frozenset(roles), project_root=self.project_root, dist=dist,
        )
        return self.info()

    def setup_remote(self, backend: str, main_config: dict, handle: dict) -> dict[str, Any]:
        """Forwarder: reconnect to the backend the driver started (starts nothing)."""
        from rlflow.backends.remote.registry import connect_backend

        self.engine = connect_backend(backend, main_config, handle)
        return self.info()

    def set_run_dir(self, run_dir: str) -> None:
        self.run_dir = run_dir

    # ---- work ---------------------------------------------------------------------------
    def run_stage(self, stage: str, kind: str, config: dict, batch: Batch, step: int) -> dict[str, Any]:
        kind_cls = get_stage_kind(kind)
        ctx = StageContext(
            pipeline=self.pipeline, config=kind_cls.parse_config(config), stage_name=stage, step=step,
            rank=self.rank, world_size=self.world_size, engine=self.engine, run_dir=self.run_dir, state=self.state,
        )
        start = time.time()
        out = kind_cls().run(batch, ctx)
        return {"batch": out, "start": start, "end": time.time(), "pid": os.getpid()}

    def call(self, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Call an engine method (update_weights, save_checkpoint, ...) with timing for the trace."""
        start = time.time()
        result = getattr(self.engine, method)(*args, **kwargs)
        return {"result": result, "start": start, "end": time.time(), "pid": os.getpid()}

    def export_weights_ref(self) -> dict[str, Any]:
        """Actor side of a cross-pool sync: the weights go into the object store once, not via the driver."""
        import ray

        start = time.time()
        ref = ray.put(self.engine.export_weights())
        return {"result": [ref], "start": start, "end": time.time(), "pid": os.getpid()}

    def load_weights_from(self, refs: list) -> dict[str, Any]:
        """Rollout side of a cross-pool sync; ``refs`` wraps the ObjectRef so Ray does not resolve it early."""
        import ray

        start = time.time()
        result = self.engine.load_rollout_weights(ray.get(refs[0]))
        return {"result": result, "start": start, "end": time.time(), "pid": os.getpid()}

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.close()


def _node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # outside Ray (tests)
        return "local"


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # outside Ray (tests): the hostname is good enough
        return socket.gethostname()
