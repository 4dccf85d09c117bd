"""``InProcessExecutor``: every resource as one ``StageWorker`` in this process, no Ray.

The executor's rules, each resource a single worker on a thread of its own. Design notes: docs/design/executor.md.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.plan.model import Placement, Plan, PlanStage
from rlflow.runtime.executor import Executor, TraceFn, TransferHandle
from rlflow.runtime.worker import StageCall, StageWorker, WorkerResult
from rlflow.schemas.pipeline import Pipeline


class InProcessExecutor(Executor):
    """Runs a plan's stages in this process: one thread per resource."""

    def __init__(
        self,
        plan: Plan,
        pipeline: Pipeline,
        project_root: str,
        trace: TraceFn = lambda records: None,
        run_dir: str | None = None,
        device: str = "cpu",
        main_config_for=None,
    ) -> None:
        super().__init__(pipeline, trace, run_dir, project_root=project_root)
        self.backends: list[Any] = []
        self.lanes: dict[str, ThreadPoolExecutor] = {}
        self.workers_of: dict[str, StageWorker] = {}
        pipeline_dict = pipeline.model_dump(by_alias=True, mode="json")
        try:
            for placement in plan.resources.values():
                if placement.type != "driver":
                    worker = StageWorker(pipeline_dict, placement.name, 0, 1, project_root, (), run_dir)
                    self.workers_of[placement.name] = worker
                    self._set_up(worker, placement, plan, device, main_config_for)
        except BaseException:
            self.close()
            raise

    def _set_up(self, worker: StageWorker, placement: Placement, plan: Plan, device: str, main_config_for) -> None:
        if placement.type == "local":
            threads = max(1, int(placement.cpus_per_worker))  # torch threads from the reservation, as under Ray
            worker.setup_local(
                device if placement.device == "auto" else placement.device,
                sorted(plan.engine_roles(placement.name)),
                None,
                threads,
            )
        elif placement.type == "remote":
            from rlflow.backends.remote.registry import create_backend

            main_config = main_config_for(placement)
            backend = create_backend(placement.backend, main_config)
            self.backends.append(backend)
            worker.setup_remote(placement.backend, main_config, backend.reconnect_handle())

    def workers(self, resource: str, which: str = "every") -> int:
        return 1

    def _lane(self, resource: str) -> ThreadPoolExecutor:
        """One thread per resource: its calls run in submission order, other resources' at the same time."""
        if resource not in self.lanes:
            self.lanes[resource] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"rlflow-{resource}")
        return self.lanes[resource]

    def _submit_on(self, stage: PlanStage, which: str, call: StageCall, shards: list[Batch] | None) -> Future:
        worker = self.workers_of[stage.resource]
        return self._lane(stage.resource).submit(worker.run_stage, call, shards[0] if shards else None)

    def _collect(self, stage: PlanStage, pending: Future) -> list[WorkerResult]:
        return [_result(pending, stage.name, stage.resource)]

    def load_checkpoint(self, stage: PlanStage, path: str) -> None:
        self.trace([self.record(0, stage.name, stage.resource, self.workers_of[stage.resource].load_checkpoint(path))])

    def set_global_steps(self, stage: PlanStage, step: int) -> None:
        self.workers_of[stage.resource].set_global_steps(step)

    def _start_transfer(self, transfer: TransferHandle) -> tuple[Future, Future]:
        source, target = self.workers_of[transfer.source], self.workers_of[transfer.target]
        exported = self._lane(transfer.source).submit(source.export_weights)
        loaded = self._lane(transfer.target).submit(lambda: target.load_weights(exported.result().value, transfer.step))
        return exported, loaded

    def _finish_transfer(self, transfer: TransferHandle) -> dict[str, float]:
        exported, loaded = transfer.pending
        self.trace([self.record(transfer.step, "export_weights", transfer.source, exported.result())])
        self.trace([self.record(transfer.step, transfer.stage.name, transfer.target, loaded.result())])
        return dict(loaded.result().value)

    def close(self) -> None:
        from rlflow.backends.remote.base import destroy_backend

        super().close()
        for lane in self.lanes.values():
            lane.shutdown(wait=True, cancel_futures=True)
        self.lanes.clear()
        for worker in self.workers_of.values():
            worker.shutdown()
        for backend in self.backends:
            destroy_backend(backend)
        self.workers_of.clear()
        self.backends.clear()


def _result(pending: Future, stage: str, resource: str) -> WorkerResult:
    """A worker call's result; a failure inside it as ``RayExecutor`` reports one: a ``StageError`` naming the
    stage, the resource and the worker, carrying the cause."""
    try:
        return pending.result()
    except Exception as exc:
        raise StageError(
            f"stage {stage!r} failed on resource {resource!r}, worker 0 (in this process): {type(exc).__name__}: {exc}"
        ) from exc
