"""``RayExecutor``: plan stages on started Ray pools, every call under a watchdog.

Design notes: docs/design/executor.md.
"""

from __future__ import annotations

import re

from rlflow.batch import Batch
from rlflow.errors import BackendError, StageError, StageTimeout
from rlflow.plan.model import PlanStage
from rlflow.runtime.executor import Executor, TraceFn, TransferHandle
from rlflow.runtime.pools import Pool
from rlflow.runtime.worker import StageCall, WorkerResult
from rlflow.schemas.pipeline import Pipeline


class RayExecutor(Executor):
    """Runs plan stages on started pools (``rlflow.runtime.pools``)."""

    def __init__(
        self,
        pools: dict[str, Pool],
        pipeline: Pipeline,
        trace: TraceFn,
        run_dir: str | None = None,
        attempt: int = 0,
        project_root: str | None = None,
    ) -> None:
        super().__init__(pipeline, trace, run_dir, attempt, project_root)
        self.pools = pools

    def _pick(self, resource: str, which: str) -> list:
        pool = self.pools[resource]
        if which == "primary":
            return pool.primary_workers()
        return pool.workers[:1] if which == "first" else pool.workers

    def workers(self, resource: str, which: str = "every") -> int:
        return len(self._pick(resource, which))

    def _submit_on(self, stage: PlanStage, which: str, call: StageCall, shards: list[Batch] | None) -> tuple:
        workers = self._pick(stage.resource, which)
        shards = shards if shards is not None else [None] * len(workers)
        return [w.run_stage.remote(call, shard) for w, shard in zip(workers, shards)], workers

    def _collect(self, stage: PlanStage, pending: tuple) -> list[WorkerResult]:
        refs, workers = pending
        return self.wait_refs(refs, stage, self.pools[stage.resource], workers)

    def load_checkpoint(self, stage: PlanStage, path: str) -> None:
        pool = self.pools[stage.resource]
        workers = pool.primary_workers()
        results = self.wait_refs([w.load_checkpoint.remote(path) for w in workers], stage, pool, workers)
        self.trace([self.record(0, stage.name, pool.name, r) for r in results])

    def set_global_steps(self, stage: PlanStage, step: int) -> None:
        pool = self.pools[stage.resource]
        self.wait_refs([w.set_global_steps.remote(step) for w in pool.workers], stage, pool, pool.workers)

    def _start_transfer(self, transfer: TransferHandle) -> tuple:
        src, dst = self.pools[transfer.source], self.pools[transfer.target]
        # the export's result goes to the loads as an object ref: the weights never pass through the driver,
        # and each load waits for the export without the driver waiting for either
        exported = src.workers[0].export_weights_ref.remote()
        loads = [w.load_weights_from.remote(exported, transfer.step) for w in dst.primary_workers()]  # remote: one
        return exported, loads

    def _finish_transfer(self, transfer: TransferHandle) -> dict[str, float]:
        exported, loads = transfer.pending
        src, dst, step = self.pools[transfer.source], self.pools[transfer.target], transfer.step
        export = self.wait_refs([exported], transfer.stage, src, src.workers[:1])[0]
        self.trace([self.record(step, "export_weights", src.name, export)])
        results = self.wait_refs(loads, transfer.stage, dst, dst.primary_workers())
        self.trace([self.record(step, transfer.stage.name, dst.name, r) for r in results])
        return Batch.concat([Batch(metrics=r.value) for r in results]).metrics

    # ---- watchdog -------------------------------------------------------------------------
    def wait_refs(self, refs: list, stage: PlanStage, pool: Pool, workers: list) -> list[WorkerResult]:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        name, limit = stage.name, stage.timeout_s
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
        outcomes = []  # every worker's result or error, read before any is raised
        for ref in refs:
            try:
                outcomes.append(ray.get(ref))
            except (RayTaskError, RayActorError) as exc:
                outcomes.append(exc)
            except GetTimeoutError as exc:  # pragma: no cover - ray.wait said it was ready
                raise StageTimeout(f"stage {name!r} on {pool.name!r}: result not retrievable") from exc
        # A dead worker comes first: its data-parallel peers then fail on their collective ("Connection closed
        # by peer"), which is a consequence, not the cause, and must not hide the death a restart recovers.
        dead = [i for i, out in enumerate(outcomes) if isinstance(out, RayActorError)]
        if dead:
            i = dead[0]
            peers = len(outcomes) - len(dead)
            also = (
                f"; {peers} peer worker(s) failed with it" if any(isinstance(o, RayTaskError) for o in outcomes) else ""
            )
            info = pool.info[i] if i < len(pool.info) else {}
            raise WorkerDied(
                f"stage {name!r}: {self._worker_name(pool, i)} of resource {pool.name!r} died: "
                f"{why_died(outcomes[i], info.get('node_id'))}{also}"
            ) from outcomes[i]
        for i, out in enumerate(outcomes):
            if isinstance(out, RayTaskError):
                cause = out.cause if getattr(out, "cause", None) is not None else out
                if pool.type == "remote" and isinstance(cause, BackendError):
                    raise BackendLost(
                        f"stage {name!r}: the remote backend of resource {pool.name!r} is gone "
                        f"(via {self._worker_name(pool, i)}): {cause}"
                    ) from out
                raise StageError(
                    f"stage {name!r} failed on resource {pool.name!r}, {self._worker_name(pool, i)}: "
                    f"{type(cause).__name__}: {cause}"
                ) from out
        return outcomes

    @staticmethod
    def _worker_name(pool: Pool, index: int) -> str:
        """``worker 1 (pid 4242 on Ray node 3a985436 at 10.0.0.7)``: the Ray node, since the nodes of one host
        (or of containers sharing a host name) share its name."""
        info = pool.info[index] if index < len(pool.info) else {}
        node_id = info.get("node_id")
        where = f"Ray node {node_id[:8]} at {info.get('node_ip', '?')}" if node_id else info.get("host", "?")
        return f"worker {index} (pid {info.get('pid', '?')} on {where})"


class WorkerDied(StageError):
    """A worker process died mid-stage (the runtime may restart the pools and resume)."""


class BackendLost(WorkerDied):
    """A remote backend stopped answering (its process died); restartable like a dead worker."""


def why_died(exc: BaseException, node_id: str | None) -> str:
    """Why a worker died, in a few words: when Ray's GCS has marked its node dead (a raylet killed, a node
    removed or cut off), that and the reason Ray gives; otherwise Ray's account of how the process ended."""
    lines = str(exc).splitlines()
    node = _node(node_id)
    if (node is not None and not node.get("Alive", True)) or any("its node has died" in line for line in lines):
        told = [line.partition("terminated unexpectedly: ")[2] for line in lines if "terminated unexpectedly: " in line]
        reason = (node or {}).get("DeathReasonMessage") or (told[0] if told else "")
        return "its Ray node died" + (f" ({reason.strip()})" if reason.strip() else "")
    # Ray's message: a fixed first line, tab-indented fields (class, actor id, pid, ...), then the cause
    causes = [line.strip() for line in lines[1:] if line.strip() and not line.startswith("\t")]
    exit_type = re.search(r"Worker exit type: (\w+)", causes[0]) if causes else None
    if exit_type:  # the process died: its exit type and the first sentence of Ray's detail (then Ray's guesses)
        detail = re.search(r"Worker exit detail: (.+?\.)(\s|$)", causes[0])
        return f"its process died ({exit_type[1]}" + (f": {detail[1]}" if detail else "") + ")"
    return (causes[0] if causes else _first_line(exc))[:300]


def _node(node_id: str | None) -> dict | None:
    """The GCS's record of node ``node_id``; None when unknown or the GCS cannot be asked (it went with the node)."""
    import ray

    if not node_id:
        return None
    try:
        return next((n for n in ray.nodes() if n.get("NodeID") == node_id), None)
    except Exception:  # the cluster is going away: the message falls back on Ray's own words
        return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
