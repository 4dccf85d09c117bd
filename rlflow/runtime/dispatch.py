"""Dispatching one plan stage to its resource's workers, under a watchdog.

- ``shard``: the batch is split into one contiguous shard per worker (a prompt's group stays
  whole because generate expands on the worker); only the fields the stage reads travel,
  unless the stage changes rows (then the whole batch goes and comes back);
- ``all``: every worker runs it (per-rank work such as a colocated weight sync); on a remote
  resource only forwarder 0 relays it, then every forwarder hears ``set_global_steps``;
- ``driver``: in this process (or, when bound to a pool, whole on its first worker).

Every call is bounded by the stage's watchdog: a hung worker ends the run with a
``StageTimeout`` naming the stage, the resource and the worker; a dead one with a
``StageError`` carrying the cause. Each worker call becomes one trace record.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from rlflow.batch import Batch
from rlflow.errors import BackendError, StageError, StageTimeout
from rlflow.stages import get_stage_kind
from rlflow.stages.base import STATE_FIELDS, StageContext

TraceFn = Callable[[list[dict[str, Any]]], None]


class Dispatcher:
    """Runs plan stages on started pools and records the trace."""

    def __init__(self, pools: dict, pipeline, trace: TraceFn, run_dir: str | None = None, attempt: int = 0) -> None:
        self.pools = pools
        self.pipeline = pipeline
        self.attempt = attempt  # which start of the pools this is (0, then 1.. after restarts), kept in the trace
        self._trace = trace
        self.run_dir = run_dir
        self.driver_state: dict[str, Any] = {}

    def trace(self, records: list[dict[str, Any]]) -> None:
        self._trace([{**r, "attempt": self.attempt} for r in records])

    # ---- stages ---------------------------------------------------------------------------
    def run_stage(self, stage, batch: Batch, step: int, config: dict | None = None, trace_as: str | None = None) -> Batch:
        """Run ``stage`` (a PlanStage) on ``batch``; returns the updated batch (metrics included).

        ``config`` overrides the stage's own (validation reuses generate greedily); ``trace_as``
        names the trace records (validation's generate and reward are traced as ``validate``).
        """
        config = stage.config if config is None else config
        label = trace_as or stage.name
        kind = get_stage_kind(stage.kind)
        if stage.resource_type == "driver":
            return self._run_on_driver(stage, kind, config, batch, step, label)
        pool = self.pools[stage.resource]
        if stage.dispatch == "all":
            workers = pool.workers[:1] if pool.type == "remote" else pool.workers
            shards = [Batch() for _ in workers]
        else:
            # a whole-batch kind (GRPO groups, filters) bound to a pool runs on its first worker
            workers = pool.workers[:1] if stage.dispatch == "driver" else pool.workers
            payload = batch if kind.changes_rows else batch.select(f for f in stage.reads if f not in STATE_FIELDS)
            shards = payload.split(len(workers))
        refs = [w.run_stage.remote(stage.name, stage.kind, dict(config), shard, step) for w, shard in zip(workers, shards)]
        results = self.wait(refs, stage, pool, workers)
        self.trace([self.record(step, label, stage.resource, r) for r in results])
        merged = Batch.concat([r["batch"] for r in results])
        if stage.dispatch == "all":
            if pool.type == "remote":  # every forwarder learns the policy version it now serves
                self.call(pool, "set_global_steps", step, stage=stage)
            batch.metrics.update(merged.metrics)
            return batch
        return _merge(batch, merged, kind.changes_rows)

    def _run_on_driver(self, stage, kind, config, batch: Batch, step: int, label: str) -> Batch:
        ctx = StageContext(pipeline=self.pipeline, config=kind.parse_config(dict(config)), stage_name=stage.name,
                           step=step, run_dir=self.run_dir, state=self.driver_state)
        start = time.time()
        out = kind().run(batch, ctx)
        self.trace([{"step": step, "stage": label, "resource": "driver", "pid": os.getpid(),
                     "start": start, "end": time.time()}])
        return _merge(batch, out, kind.changes_rows)

    # ---- engine calls ---------------------------------------------------------------------
    def call(self, pool, method: str, *args: Any, stage=None, step: int = 0, label: str | None = None,
             workers: list | None = None, timeout: float | None = None) -> list[Any]:
        """Call an engine method on ``workers`` (default: all of the pool), traced as ``label``."""
        workers = pool.workers if workers is None else workers
        refs = [w.call.remote(method, *args) for w in workers]
        results = self.wait(refs, stage, pool, workers, timeout=timeout, what=label or method)
        if label:
            self.trace([self.record(step, label, pool.name, r) for r in results])
        return [r["result"] for r in results]

    # ---- watchdog -------------------------------------------------------------------------
    def wait(self, refs: list, stage, pool, workers: list, timeout: float | None = None, what: str | None = None) -> list:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        name = what or (stage.name if stage is not None else "call")
        limit = timeout or (stage.timeout_s if stage is not None else self.pipeline.trainer.stage_timeout_s)
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=limit)
        if pending:
            late = [i for i, ref in enumerate(refs) if ref in pending]
            who = ", ".join(self._worker_name(pool, i) for i in late)
            for i in late:  # a hung actor cannot be interrupted (Ray refuses force-cancel of actor tasks): end it
                ray.kill(workers[i], no_restart=True)
            raise StageTimeout(
                f"stage {name!r} on resource {pool.name!r} did not finish within {limit:g} s on {who}; "
                f"the worker is hung or far too slow (raise `timeout_s` on the stage or trainer.stage_timeout_s if it is just slow)"
            )
        results = []
        for i, ref in enumerate(refs):
            try:
                results.append(ray.get(ref))
            except RayTaskError as exc:
                cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                if pool.type == "remote" and isinstance(cause, BackendError):
                    raise BackendLost(
                        f"stage {name!r}: the remote backend of resource {pool.name!r} is gone "
                        f"(via {self._worker_name(pool, i)}): {cause}"
                    ) from exc
                raise StageError(
                    f"stage {name!r} failed on resource {pool.name!r}, {self._worker_name(pool, i)}: "
                    f"{type(cause).__name__}: {cause}"
                ) from exc
            except RayActorError as exc:
                raise WorkerDied(
                    f"stage {name!r}: worker {self._worker_name(pool, i)} of resource {pool.name!r} died: {_first_line(exc)}"
                ) from exc
            except GetTimeoutError as exc:  # pragma: no cover - ray.wait said it was ready
                raise StageTimeout(f"stage {name!r} on {pool.name!r}: result not retrievable") from exc
        return results

    @staticmethod
    def _worker_name(pool, index: int) -> str:
        info = pool.info[index] if index < len(pool.info) else {}
        return f"worker {index} (pid {info.get('pid', '?')} on {info.get('host', '?')})"

    @staticmethod
    def record(step: int, stage: str, resource: str, result: dict) -> dict[str, Any]:
        return {"step": step, "stage": stage, "resource": resource, "pid": result["pid"],
                "start": result["start"], "end": result["end"]}


def _merge(batch: Batch, out: Batch, changes_rows: bool) -> Batch:
    """A stage's output into the step's batch: taken whole when it changed rows, else its fields added."""
    if changes_rows:
        out.metrics = {**batch.metrics, **out.metrics}
        return out
    if out is batch:
        return batch
    return batch.update(out)


class WorkerDied(StageError):
    """A worker process died mid-stage (the runtime may restart the pools and resume)."""


class BackendLost(WorkerDied):
    """A remote backend stopped answering (its process died); restartable like a dead worker."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
