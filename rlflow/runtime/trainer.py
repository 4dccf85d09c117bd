"""The step loop: runs a compiled Plan over an executor in PPOTrainerSync's order.

Init phase: the resume phase when resuming, the weight sync (verl syncs before the first
generation; traced as step 0), validation when ``val_before_train`` (fresh runs only, so a
resumed run never logs a step twice). Then the pipeline's trainer mode (``rlflow.runtime.modes``:
``sync``, or ``separate_async`` sampling ahead) runs the steps through ``run_stages``; stages whose
cadence is ``save_freq`` or ``test_freq`` run when it hits. Metrics carry verl's names and go
to every sink; each stage execution becomes a trace record.

The loop knows stages by role, never by kind name. Three roles get more than a plain
dispatch, for what one worker cannot do alone: ``checkpoint`` (a temporary directory renamed
into place with the data position once every worker's part is written), ``weight_sync`` (a
rollout on another pool, local or remote, receives the weights with their policy version;
the forwarders of a backend that syncs inside itself learn the version) and ``validation``
(the validation set goes through the rollout, with the validation stage's sampling, and the
reward stages, then the validation stage turns the scores into metrics). The executor (Ray or
in-process) decides where each call runs. Loading a checkpoint and validating before training
are console phases (the console is also a sink).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlflow.batch import Batch
from rlflow.errors import ResumeError, StageError
from rlflow.metrics import num_turns
from rlflow.plan.concurrency import step_dependencies
from rlflow.plan.model import Plan, PlanStage
from rlflow.runtime import checkpoints, interrupts
from rlflow.runtime.console import QUIET, RunConsole
from rlflow.runtime.executor import Executor
from rlflow.runtime.modes import get_trainer_mode
from rlflow.runtime.run_dir import RunDir
from rlflow.runtime.sinks import StepTimer
from rlflow.schemas.pipeline import DRIVER, Pipeline
from rlflow.stages import get_stage_kind
from rlflow.stages.base import due

TRANSCRIPTS_PER_STEP = 4  # multi-turn rollouts written whole to transcripts.jsonl each step
TRANSCRIPT_CHARS = 8000  # of a prompt or a transcript kept there

log = logging.getLogger("rlflow.runtime")


@dataclass
class DataState:
    """The driver's data: tokenizer, datasets and the train sampler (checkpointed for exact resume)."""

    tokenizer: Any
    train: Any
    val: Any
    sampler: Any


def load_data(spec, root: Path) -> DataState:
    from rlflow.data import load_split
    from rlflow.data.tokenizer import load_prompt_tokenizer

    tokenizer = load_prompt_tokenizer(spec.model, root)
    train = load_split(spec, "train", root, tokenizer)
    val = load_split(spec, "val", root, tokenizer) if spec.data.val else None
    data = DataState(tokenizer, train, val, None)
    data.sampler = fresh_sampler(spec, data)
    return data


def fresh_sampler(spec, data: DataState):
    """The train sampler at its very first position."""
    from rlflow.data import StepSampler

    return StepSampler(len(data.train), spec.trainer.train_batch_size, spec.trainer.seed, spec.data.shuffle)


def total_steps(spec, data: DataState) -> int:
    return spec.trainer.total_steps or spec.trainer.total_epochs * data.sampler.steps_per_epoch


class StepLoop:
    """One attempt at training: from ``start_step`` to the last step, over an executor."""

    def __init__(
        self,
        spec: Pipeline,
        plan: Plan,
        executor: Executor,
        run_dir: RunDir,
        data: DataState,
        resolved_yaml: str,
        sinks: list,
        console: RunConsole | None = None,
    ) -> None:
        self.spec = spec
        self.plan = plan
        self.executor = executor
        self.run_dir = run_dir
        self.data = data
        self.resolved_yaml = resolved_yaml
        self.sinks = sinks
        self.console = console or RunConsole(QUIET)
        self.total = total_steps(spec, data)
        update = plan.first_with_role("update")
        self.devices = executor.data_parallel_size(update.resource) if update is not None else 1  # verl: per GPU
        self.dependencies = step_dependencies(plan.step, plan.edges)  # within a step, derived by the plan
        self.mode = get_trainer_mode(spec.trainer.trainer_mode)(self)
        self._pending_checkpoint: tuple[PlanStage, int, Path, dict[str, Any]] | None = None

    # ---- init -------------------------------------------------------------------------
    def init(self, resume_from: Path | None) -> int:
        """Run the init phase; returns the first step to train."""
        start = 1
        for stage in self.plan.init:
            if stage.role == "resume":
                if resume_from is not None:
                    with self.console.phase(f"load checkpoint {resume_from.name}", record=False):
                        start = self._load_checkpoint(resume_from, stage) + 1
            elif stage.role == "weight_sync":
                self.sync_weights(stage, Batch(), 0 if start == 1 else start - 1)
            elif stage.role == "validation" and resume_from is None and self.spec.trainer.val_before_train:
                with self.console.phase("validate before training", record=False):  # traced as step 0
                    metrics = self._validate(stage, 0)
                self.log_metrics(0, metrics)
        return start

    def _load_checkpoint(self, path: Path, stage: PlanStage) -> int:
        if stage.resource_type == DRIVER:
            raise ResumeError("the actor is updated on the driver; there is no model state to restore")
        state = checkpoints.read_state(path)
        step = int(state["global_step"])
        self.data.sampler.load_state_dict(state["sampler"])
        self.executor.load_checkpoint(stage, str(path))
        self.mode.load_state(state, path)
        return step

    # ---- steps ------------------------------------------------------------------------
    def train(self, start: int) -> dict[str, Any]:
        """Train from ``start`` to the last step in the pipeline's trainer mode; the last step's metrics."""
        return self.mode.train(start)

    def sample_batch(self, step: int) -> Batch:
        """The next prompts from the sampler, as step ``step``'s batch."""
        return self.data.train.to_batch(self.data.sampler.next_indices(), self.data.tokenizer.pad_token_id, step=step)

    def run_stages(
        self,
        step: int,
        batch: Batch,
        stages,
        timer: StepTimer,
        epoch: int,
        mode,
        *,
        overlap: bool = False,
        step_start: float | None = None,
    ) -> dict[str, Any]:
        """Run ``stages`` of ``step`` on ``batch`` and return the step's metrics.

        ``overlap``: a stage that only adds fields is submitted as soon as the stages the plan says it
        depends on are done, so stages on different resources run at once (the reward beside the
        log-prob passes); any other stage waits for everything submitted before it. Without it, one
        after another.
        """
        val_metrics: dict[str, Any] = {}
        timing_end: float | None = None  # timing_s/step covers verl's steps 1-10, not validation
        step_start = time.perf_counter() if step_start is None else step_start
        in_flight: list[tuple[Any, str]] = []  # (handle, timer name)

        def settle(needs=None) -> None:
            for entry in list(in_flight):
                handle, name = entry
                if needs is None or handle.stage.name in needs:
                    self.executor.wait(handle)
                    # the stage's own seconds: from submission it may have queued behind another stage
                    # on its resource, or finished long before the loop came to wait for it
                    timer.timing[name] = timer.timing.get(name, 0.0) + handle.ran
                    in_flight.remove(entry)

        for stage in stages:
            interrupts.raise_if_requested()
            if not self.due(stage, step):
                continue
            name = stage.verl_timer or stage.name
            if overlap and _may_overlap(stage):
                settle(self.dependencies[stage.name])  # the plan's: what it reads, and the row barriers
                in_flight.append((self.executor.submit(stage, batch, step), name))
                continue
            settle()
            if stage.role == "validation":
                timing_end = time.perf_counter()
                with timer.time(name):
                    val_metrics = self._validate(stage, step)
                continue
            with timer.time(name):
                if stage.role == "checkpoint":
                    self._save_checkpoint(step, stage)
                elif stage.role == "weight_sync":
                    mode.sync_weights(stage, batch, step)
                else:
                    batch = self.executor.run_stage(stage, batch, step)
            if stage.role == "rollout":
                batch = mode.on_sample_end(step, batch)
        settle()
        timing = dict(timer.timing)
        timing["step"] = (timing_end or time.perf_counter()) - step_start
        if "num_turns" in batch:
            self.run_dir.append_transcripts(transcripts(step, batch))
        return self._step_metrics(step, epoch, batch, timing, val_metrics)

    def due(self, stage: PlanStage, step: int) -> bool:
        return due(stage.cadence, self.spec.trainer, step, self.total)

    def _step_metrics(self, step: int, epoch: int, batch: Batch, timing: dict, val_metrics: dict) -> dict[str, Any]:
        from rlflow.metrics import (
            compute_data_metrics,
            compute_rollout_metrics,
            compute_seqlen_metrics,
            compute_timing_metrics,
        )

        metrics: dict[str, Any] = {"training/global_step": step, "training/epoch": epoch}
        metrics.update(batch.metrics)
        metrics.update(compute_seqlen_metrics(batch, self.devices))
        metrics.update(compute_rollout_metrics(batch))
        metrics.update(compute_data_metrics(batch))
        metrics.update(compute_timing_metrics(timing, batch, n_gpus=self.devices))
        metrics.update(val_metrics)
        return metrics

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        """metrics.jsonl, then every sink. A sink that fails (a logger's server gone, a full disk) is
        dropped with one warning and training goes on: metrics.jsonl holds every step."""
        record = {"step": step, **metrics}
        self.run_dir.append_metrics(record)
        for sink in list(self.sinks):
            try:
                sink.log(step, metrics)
            except Exception as exc:
                self.sinks.remove(sink)
                log.warning(
                    "metrics sink %r failed at step %d (%s: %s); going on without it (metrics.jsonl has every step)",
                    sink.name,
                    step,
                    type(exc).__name__,
                    exc,
                )
                with contextlib.suppress(Exception):
                    sink.close()

    # ---- weight sync, checkpoints, validation -------------------------------------------
    def sync_weights(self, stage: PlanStage, batch: Batch, step: int, *, wait: bool = True) -> Any:
        """The weight-sync stage of ``step`` (policy version ``step``). A rollout on another pool (local, or a
        remote backend that takes weights) is sent the weights: waited for, or (``wait=False``) its pending
        transfer returned."""
        batch = self.executor.run_stage(stage, batch, step)  # "all" dispatch: metrics land in batch.metrics
        if stage.resource_type == "remote":  # every forwarder learns the policy version it now serves
            self.executor.set_global_steps(stage, step)
        rollout = self.plan.first_with_role("rollout")
        if rollout is None or rollout.resource == stage.resource or rollout.resource_type not in ("local", "remote"):
            return None
        pending = self.executor.submit_transfer(stage, stage.resource, rollout.resource, step)
        if not wait:
            return pending
        batch.metrics.update(self.executor.wait_transfer(pending))
        return None

    def _save_checkpoint(self, step: int, stage: PlanStage) -> None:
        """Write step ``step``'s checkpoint to a temporary directory; ``commit_checkpoint`` renames it into
        place once the step's metrics are logged, so a committed step is never missing from metrics.jsonl
        (a failure in between resumes from the checkpoint before, whose later metrics are truncated)."""
        if stage.resource_type == DRIVER:
            raise ResumeError("the actor is updated on the driver; there is no model state to checkpoint")
        self.abort_checkpoint()  # a step has one checkpoint; an earlier one left pending is not the run's
        tmp = checkpoints.begin(self.run_dir.checkpoints, step)
        with self._checkpoint_faults(stage, step, tmp):
            self.executor.run_stage(stage, Batch(), step, checkpoint_dir=str(tmp))
            (tmp / "pipeline.resolved.yaml").write_text(self.resolved_yaml)
            state = {"global_step": step, "sampler": self.data.sampler.state_dict(), "pipeline": self.spec.name}
            state.update(self.mode.save_state(step, tmp))
        self._pending_checkpoint = (stage, step, tmp, state)

    def commit_checkpoint(self, step: int) -> None:
        """Commit the checkpoint written during step ``step`` (after its metrics are logged); none: nothing."""
        pending, self._pending_checkpoint = self._pending_checkpoint, None
        if pending is None:
            return
        stage, saved_at, tmp, state = pending
        if saved_at != step:
            checkpoints.abort(tmp)
            return
        with self._checkpoint_faults(stage, step, tmp):
            checkpoints.commit(self.run_dir.checkpoints, tmp, step, state, self.spec.trainer.keep_checkpoints)

    def abort_checkpoint(self) -> None:
        """Drop a checkpoint written but not committed (the attempt ended before its step was logged)."""
        pending, self._pending_checkpoint = self._pending_checkpoint, None
        if pending is not None:
            checkpoints.abort(pending[2])

    @contextlib.contextmanager
    def _checkpoint_faults(self, stage: PlanStage, step: int, tmp: Path):
        """A failure while writing or committing removes the temporary directory; a full disk says so, whoever
        wrote (a worker's part, or torch saving the batches in flight on the driver, which raises RuntimeError)."""
        try:
            yield
        except Exception as exc:
            checkpoints.abort(tmp)
            full = checkpoints.disk_full_reason(self.run_dir.checkpoints, exc)
            if full:
                raise StageError(f"stage {stage.name!r} at step {step}: {full}") from exc
            raise
        except BaseException:
            checkpoints.abort(tmp)
            raise

    def _validate(self, stage: PlanStage, step: int) -> dict[str, Any]:
        if self.data.val is None or len(self.data.val) == 0:
            return {}
        rollout = self.plan.first_with_role("rollout")
        config = get_stage_kind(rollout.kind).with_sampling(dict(rollout.config), dict(stage.config))  # greedy, n
        batch = self.data.val.to_batch(list(range(len(self.data.val))), self.data.tokenizer.pad_token_id, step=-1)
        batch = self.executor.run_stage(rollout, batch, step, config=config, trace_as=stage.name)
        for reward in self.plan.with_role("reward"):
            batch = self.executor.run_stage(reward, batch, step, trace_as=stage.name)
        metrics = self.executor.run_here(stage, batch, step).metrics
        if "rollout/policy_version" in batch.metrics:  # which weights answered (async: the latest sent)
            metrics["val-aux/policy_version"] = batch.metrics["rollout/policy_version"]
        turns = num_turns(batch)  # verl's validation reports the rollouts' turns, 2 each for single-turn ones
        metrics.update({f"val-aux/num_turns/{k}": float(getattr(turns, k)()) for k in ("min", "max", "mean")})
        return metrics


def _may_overlap(stage: PlanStage) -> bool:
    """Whether a stage only adds fields to the batch, so it can run beside other such stages."""
    return stage.role not in ("rollout", "checkpoint", "weight_sync", "validation") and not stage.changes_rows


def transcripts(step: int, batch: Batch, count: int = TRANSCRIPTS_PER_STEP) -> list[dict[str, Any]]:
    """The first ``count`` rollouts of a multi-turn step, whole: verl's dump keys (input, output, score) and
    the turns; the text of each is cut to ``TRANSCRIPT_CHARS``."""
    rows = range(min(count, len(batch)))
    scores = batch["token_level_scores"].sum(-1).tolist() if "token_level_scores" in batch else None

    def cut(text: str) -> str:
        return text if len(text) <= TRANSCRIPT_CHARS else text[:TRANSCRIPT_CHARS] + "...(cut)"

    return [
        {
            "step": step,
            "input": cut(batch["raw_prompt"][i]) if "raw_prompt" in batch else "",
            "output": cut(batch["response_text"][i]),
            "score": None if scores is None else scores[i],
            "num_turns": int(batch["num_turns"][i]),
        }
        for i in rows
    ]
