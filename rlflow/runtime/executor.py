"""The step loop's executor interface: where plan stages run, and the rules every executor shares.

``submit`` / ``wait`` a stage, ``submit_transfer`` / ``wait_transfer`` the weights; dispatch, the output
check, the merge and the trace are here, once, for ``RayExecutor`` and ``InProcessExecutor``. Design
notes: docs/design/executor.md.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.plan.model import PlanStage
from rlflow.runtime.worker import StageCall, WorkerResult
from rlflow.schemas.pipeline import DRIVER, Pipeline
from rlflow.stages import STATE_FIELDS, StageContext, get_stage_kind
from rlflow.stages.fields import output_problems

TraceFn = Callable[[list[dict[str, Any]]], None]
log = logging.getLogger("rlflow.runtime")


@dataclass(eq=False)
class Handle:
    """A submitted stage call: what ``Executor.wait`` needs to finish it."""

    stage: PlanStage
    batch: Batch  # the batch the output merges into
    step: int
    label: str  # the trace records' stage name
    pending: Any = None  # the executor's own (Ray object refs, futures)
    rows: list[int] = field(default_factory=list)  # rows sent to each worker, for the output check
    numpy: bool = False  # sent as numpy arrays (a kind that never imports torch)
    on_driver: bool = False  # runs on the executor's driver thread: pending is its future
    output: Batch | None = None  # what the stage returned (its fields and metrics), once waited for
    done: Batch | None = None  # ``batch`` with the output merged in (a new batch), once waited for
    ran: float | None = None  # seconds the stage itself ran (its slowest worker), once waited for


@dataclass(eq=False)
class TransferHandle:
    """A submitted weight transfer, the actor's weights to a rollout on another pool: what ``wait_transfer`` needs."""

    stage: PlanStage  # the weight-sync stage (its watchdog bounds the waits)
    step: int  # the policy version the rollout serves once the weights are loaded
    source: str  # the actor's resource
    target: str  # the rollout's resource
    pending: Any = None  # the executor's own (futures, object refs)
    metrics: dict[str, float] | None = None  # the transfer's ``sync/*`` metrics, once waited for


class Executor(abc.ABC):
    """Runs plan stages on the resources they are bound to, and records the trace."""

    def __init__(
        self,
        pipeline: Pipeline,
        trace: TraceFn,
        run_dir: str | None = None,
        attempt: int = 0,
        project_root: str | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.run_dir = run_dir
        self.project_root = project_root  # for stages that run here (on the driver)
        self.attempt = attempt  # which start of the workers this is (0, then 1.. after restarts)
        self._trace = trace
        self.driver_state: dict[str, Any] = {}
        self.driver_at_shutdown = contextlib.ExitStack()  # the driver stages' processes, closed by ``close``
        self._driver_lane: ThreadPoolExecutor | None = None  # stages bound to the driver, when submitted

    # ---- what each executor provides --------------------------------------------------------
    @abc.abstractmethod
    def _submit_on(self, stage: PlanStage, which: str, call: StageCall, shards: list[Batch] | None) -> Any:
        """Start ``call`` on the workers of ``stage.resource`` picked by ``which`` (``primary``: every
        worker that holds state, ``first``, ``every``); ``shards`` holds one batch per worker, or None
        for an empty batch each. Returns what ``_collect`` waits on."""

    @abc.abstractmethod
    def _collect(self, stage: PlanStage, pending: Any) -> list[WorkerResult]:
        """The results of a ``_submit_on``, in worker order, once all are in."""

    @abc.abstractmethod
    def workers(self, resource: str, which: str = "every") -> int:
        """How many workers of ``resource`` ``which`` picks."""

    @abc.abstractmethod
    def load_checkpoint(self, stage: PlanStage, path: str) -> None:
        """Restore the model state of ``stage.resource`` from ``path`` (the resume phase)."""

    @abc.abstractmethod
    def _start_transfer(self, transfer: TransferHandle) -> Any:
        """Start exporting ``transfer.source``'s weights and loading them on ``transfer.target``'s rollout
        workers; returns what ``_finish_transfer`` waits on."""

    @abc.abstractmethod
    def _finish_transfer(self, transfer: TransferHandle) -> dict[str, float]:
        """Wait for a started transfer; its ``sync/*`` metrics (traced as export and load)."""

    @abc.abstractmethod
    def set_global_steps(self, stage: PlanStage, step: int) -> None:
        """Tell every worker of ``stage.resource`` which policy version its rollout now serves."""

    def close(self) -> None:
        """Release what the executor holds (subclasses add their workers)."""
        if self._driver_lane is not None:
            self._driver_lane.shutdown(wait=True, cancel_futures=True)
            self._driver_lane = None
        self.driver_at_shutdown.close()

    # ---- shared by every executor -----------------------------------------------------------
    def submit_transfer(self, stage: PlanStage, source: str, target: str, step: int) -> TransferHandle:
        """Start carrying the actor's weights from ``source`` to the rollout workers of ``target``, which then
        serve policy version ``step``; the load runs after the calls already submitted to ``target``."""
        transfer = TransferHandle(stage, step, source, target)
        transfer.pending = self._start_transfer(transfer)
        return transfer

    def wait_transfer(self, transfer: TransferHandle) -> dict[str, float]:
        """The ``sync/*`` metrics of a submitted transfer, once it is done (waiting again returns them again)."""
        if transfer.metrics is None:
            transfer.metrics = self._finish_transfer(transfer)
        return dict(transfer.metrics)

    def data_parallel_size(self, resource: str) -> int:
        """Workers a stage on ``resource`` is split over (1 on the driver), verl's per-GPU divisor."""
        return 1 if resource == DRIVER else self.workers(resource)

    def run_stage(
        self,
        stage: PlanStage,
        batch: Batch,
        step: int,
        *,
        config: Mapping[str, Any] | None = None,
        trace_as: str | None = None,
        checkpoint_dir: str | None = None,
    ) -> Batch:
        """Run ``stage`` on ``batch`` and wait for it; returns the updated batch (metrics included).

        ``config`` overrides the stage's own (validation reuses the rollout with its sampling);
        ``trace_as`` names the trace records (validation's rollout and reward are traced as
        ``validate``); ``checkpoint_dir`` is where a checkpoint stage writes.
        """
        return self.wait(
            self.submit(stage, batch, step, config=config, trace_as=trace_as, checkpoint_dir=checkpoint_dir)
        )

    def submit(
        self,
        stage: PlanStage,
        batch: Batch,
        step: int,
        *,
        config: Mapping[str, Any] | None = None,
        trace_as: str | None = None,
        checkpoint_dir: str | None = None,
    ) -> Handle:
        """Start ``stage`` on ``batch`` and return at once; ``wait(handle)`` gives what ``run_stage`` would.

        What the stage is sent is taken now, so ``batch`` may change before the wait. Calls on one
        resource run in the order they were submitted; calls on different resources run at once.
        A stage bound to the driver runs on a thread of this process (one at a time, in order).
        """
        call = StageCall(
            stage.name,
            stage.kind,
            dict(stage.config if config is None else config),
            step,
            stage.reads,
            checkpoint_dir,
            dict(stage.sampling),
        )
        label = trace_as or stage.name
        handle = Handle(stage, batch, step, label)
        if stage.resource_type == DRIVER:
            if self._driver_lane is None:
                self._driver_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlflow-driver")
            sent = batch if stage.changes_rows else payload(stage, batch)  # what it reads, as it is now
            handle.pending = self._driver_lane.submit(self._timed_here, stage, sent, step, call=call, label=label)
            handle.on_driver = True
            return handle
        if stage.dispatch == "all":  # an empty batch each, only metrics back: nothing to check
            handle.pending = self._submit_on(stage, "primary", call, None)
            return handle
        # a whole-batch kind (GRPO groups, filters) bound to a pool runs on its first worker
        which = "first" if stage.dispatch == "driver" else "every"
        shards = payload(stage, batch).split(self.workers(stage.resource, which))
        handle.rows = [len(s) for s in shards]
        handle.numpy = not get_stage_kind(stage.kind).uses_torch
        if handle.numpy:  # numpy both ways: the worker never unpickles a tensor, so it never imports torch
            shards = [s.to_numpy() for s in shards]
        handle.pending = self._submit_on(stage, which, call, shards)
        return handle

    def wait(self, handle: Handle) -> Batch:
        """The batch of a submitted stage, once every worker has answered (under the stage's watchdog)."""
        if handle.done is not None:
            return handle.done
        stage = handle.stage
        if handle.on_driver:
            handle.output, handle.ran = handle.pending.result()
            handle.done = merge(handle.batch, handle.output, stage.changes_rows)
            return handle.done
        results = self._collect(stage, handle.pending)
        # each worker's own clock, from when it took the call up: not the time it waited in a queue
        handle.ran = max((r.end - r.start for r in results), default=0.0)
        if handle.numpy:
            for result in results:
                result.batch = result.batch.to_torch()
        self.trace([self.record(handle.step, handle.label, stage.resource, r) for r in results])
        for rank, result in enumerate(results):
            if result.pid != os.getpid():  # a worker in this process logged its warnings here already
                for warning in result.warnings:
                    log.warning("%s, worker %d: %s", self.describe_resource(stage.resource), rank, warning)
        for rank, (rows, result) in enumerate(zip(handle.rows, results)):
            self.check_output(stage, result.batch, rows, handle.step, rank if len(handle.rows) > 1 else None)
        merged = Batch.concat([r.batch for r in results])
        handle.output = Batch(metrics=merged.metrics) if stage.dispatch == "all" else merged
        handle.done = merge(handle.batch, handle.output, stage.changes_rows)
        return handle.done

    def run_here(
        self, stage: PlanStage, batch: Batch, step: int, *, call: StageCall | None = None, label: str | None = None
    ) -> Batch:
        """Run ``stage`` in this process on the whole batch (driver stages, validation metrics); its output."""
        call = call or StageCall(
            stage.name, stage.kind, dict(stage.config), step, stage.reads, None, dict(stage.sampling)
        )
        kind = get_stage_kind(call.kind)
        ctx = StageContext(
            pipeline=self.pipeline,
            config=kind.parse_config(call.config),
            stage_name=call.stage,
            step=step,
            run_dir=self.run_dir,
            reads=call.reads,
            project_root=self.project_root,
            state=self.driver_state,
            sampling=call.sampling,
            at_shutdown=self.driver_at_shutdown,
        )
        start = time.time()
        out = (
            kind().run(batch, ctx) if kind.uses_torch else kind().run(payload(stage, batch).to_numpy(), ctx).to_torch()
        )
        self.trace(
            [
                {
                    "step": step,
                    "stage": label or stage.name,
                    "resource": DRIVER,
                    "pid": os.getpid(),
                    "start": start,
                    "end": time.time(),
                }
            ]
        )
        self.check_output(stage, out, len(batch), step)
        return out

    def _timed_here(self, stage: PlanStage, batch: Batch, step: int, **kwargs: Any) -> tuple[Batch, float]:
        """``run_here`` on the driver lane, with the seconds it ran (not those it waited for the lane)."""
        start = time.perf_counter()
        out = self.run_here(stage, batch, step, **kwargs)
        return out, time.perf_counter() - start

    def check_output(self, stage: PlanStage, out: Batch, rows: int, step: int, worker: int | None = None) -> None:
        """Refuse ``out`` unless it holds ``stage.writes`` as rlflow.stages.fields describes them.

        ``rows``: the rows sent; an empty shard that returns nothing is fine (it adds no rows).
        """
        if rows == 0 and not out.keys():
            return
        expected_rows = None if stage.changes_rows else rows
        problems = output_problems(out, stage.writes, expected_rows, self.pipeline.data.max_response_length)
        if problems:
            raise StageError(
                f"step {step}, stage {stage.name!r} on {self.describe_resource(stage.resource)}"
                + (f" (worker {worker})" if worker is not None else "")
                + f" returned a batch that breaks the stage's outputs: {'; '.join(problems)}"
                + " (the engine or backend behind it must return every field the stage writes, in that shape and dtype)"
            )

    def describe_resource(self, resource: str) -> str:
        """``remote backend 'reference' (resource 'arctic')``, ``cpu pool 'reward_pool'``, ``the driver``."""
        spec = self.pipeline.resources.get(resource)
        if resource == DRIVER or spec is None:
            return "the driver"
        if spec.type == "remote":
            return f"remote backend {spec.backend!r} (resource {resource!r})"
        return f"{spec.type} pool {resource!r}"

    def trace(self, records: list[dict[str, Any]]) -> None:
        self._trace([{**r, "attempt": self.attempt} for r in records])

    @staticmethod
    def record(step: int, stage: str, resource: str, result: WorkerResult) -> dict[str, Any]:
        return {
            "step": step,
            "stage": stage,
            "resource": resource,
            "pid": result.pid,
            "start": result.start,
            "end": result.end,
        }


def payload(stage: PlanStage, batch: Batch) -> Batch:
    """What a stage is sent: the whole batch when it changes rows, else only the fields it reads."""
    return batch if stage.changes_rows else batch.select(f for f in stage.reads if f not in STATE_FIELDS)


def merge(batch: Batch, out: Batch, changes_rows: bool) -> Batch:
    """A new batch: a stage's output taken whole when it changed rows, else ``batch`` with its fields added;
    the metrics of both either way. Neither input changes."""
    if changes_rows:
        return Batch(dict(out.tensors), dict(out.non_tensors), {**batch.metrics, **out.metrics})
    return batch.merged(out)
