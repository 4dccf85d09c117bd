"""The step loop: one attempt at training, a compiled Plan run over an executor in PPOTrainerSync's order.

The init phase (resume, weight sync, validation before training), then the trainer mode's steps
(``rlflow.runtime.modes``), whose stages run through ``run_stages``. Design notes: docs/design/step_loop.md.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlflow.batch import Batch
from rlflow.errors import ResumeError, StageError
from rlflow.metrics import num_turns
from rlflow.plan.model import Plan, PlanStage
from rlflow.runtime import checkpoints, interrupts
from rlflow.runtime.console import QUIET, RunConsole
from rlflow.runtime.dynamic_sampling import Refill
from rlflow.runtime.executor import Executor, Handle, merge
from rlflow.runtime.modes import get_trainer_mode
from rlflow.runtime.run_dir import RunDir
from rlflow.runtime.step_record import StepRecord
from rlflow.schemas.pipeline import DRIVER, Pipeline
from rlflow.stages import get_stage_kind
from rlflow.stages.base import due

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.runtime.executor import TransferHandle

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

    # what a trainer mode may use of the loop (``loop.plan`` is read as data); tests/test_layers.py holds them to it
    FOR_MODES = frozenset(
        {"plan", "total", "epoch", "draw", "refill_rules", "submit", "wait", "wait_transfer", "run_stages",
         "finish_step", "log_metrics", "commit_checkpoint", "abort_checkpoint"}
    )  # fmt: skip

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
        self.waits = {name: set(earlier) for name, earlier in plan.waits}  # within a step, from the plan
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
                _, transfer = self.send_weights(stage, Batch(), 0 if start == 1 else start - 1)
                if transfer is not None:
                    self.wait_transfer(transfer)
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
        for each in self.plan.on_every_checkpointed_pool(stage):
            self.executor.load_checkpoint(each, str(path))
        self.mode.load_state(state, path)
        return step

    # ---- steps: what a trainer mode calls (FOR_MODES) ---------------------------------------
    def train(self, start: int) -> dict[str, Any]:
        """Train from ``start`` to the last step in the pipeline's trainer mode; the last step's metrics."""
        return self.mode.train(start)

    @property
    def epoch(self) -> int:
        """The epoch the next prompts drawn belong to."""
        return self.data.sampler.epoch

    def draw(self, step: int, count: int | None = None) -> Batch:
        """The next prompts from the sampler as step ``step``'s batch: a training batch, or ``count`` prompts."""
        sampler = self.data.sampler
        indices = sampler.next_indices() if count is None else sampler.take(count)
        return self.data.train.to_batch(indices, self.data.tokenizer.pad_token_id, step=step)

    def refill_rules(self) -> Refill:
        """What dynamic sampling's refill reads: verl's ``filter_groups`` block and the sizes around it."""
        size = self.spec.trainer.train_batch_size
        return Refill(self.spec.algorithm.filter_groups, size, self.data.sampler.steps_per_epoch * size,
                      self.data.tokenizer.pad_token_id)  # fmt: skip

    def submit(self, stage: PlanStage, batch: Batch, step: int) -> Handle:
        """Start one stage and return at once (a rollout sampling ahead); ``wait`` gives its batch."""
        return self.executor.submit(stage, batch, step)

    def wait(self, handle: Handle) -> Batch:
        return self.executor.wait(handle)

    def wait_transfer(self, transfer: TransferHandle) -> dict[str, float]:
        """Wait for a weight transfer ``run_stages`` submitted; its ``sync/*`` metrics."""
        return self.executor.wait_transfer(transfer)

    def run_stages(self, stages, batch: Batch, record: StepRecord) -> tuple[Batch, list[TransferHandle]]:
        """Run the due ``stages`` of step ``record.step`` on ``batch``; the batch they leave, and the weight
        transfers submitted and not yet waited for (the mode decides when to wait).

        Each stage starts once the stages the plan says it waits for are done (``Plan.waits``). A stage that
        the next one waits for runs alone and is timed here; any other is submitted, so stages on different
        resources run at once, and is timed by its own workers' clocks. Each stage returns what it adds and
        its output is merged into the batch here.
        """
        step = record.step
        due = [s for s in stages if self.due(s, step)]
        in_flight: list[Handle] = []
        transfers: list[TransferHandle] = []

        def settle(names=None) -> Batch:
            merged = batch
            for handle in list(in_flight):
                if names is None or handle.stage.name in names:
                    self.executor.wait(handle)
                    merged = merge(merged, handle.output, handle.stage.changes_rows)
                    record.add(_timer_name(handle.stage), handle.ran)
                    in_flight.remove(handle)
            return merged

        for i, stage in enumerate(due):
            interrupts.raise_if_requested()
            batch = settle(self.waits[stage.name])
            if i + 1 < len(due) and stage.name not in self.waits[due[i + 1].name]:
                in_flight.append(self.executor.submit(stage, batch, step))
                continue
            name = _timer_name(stage)
            if stage.role == "validation":
                record.stop_clock()
                with record.time(name):
                    record.validation = self._validate(stage, step)
                continue
            with record.time(name):
                if stage.role == "checkpoint":
                    self._save_checkpoint(step, stage)
                elif stage.role == "weight_sync":
                    batch, transfer = self.send_weights(stage, batch, step)
                    transfers += [transfer] if transfer is not None else []
                else:
                    batch = self.executor.run_stage(stage, batch, step)
        return settle(), transfers

    def due(self, stage: PlanStage, step: int) -> bool:
        return due(stage.cadence, self.spec.trainer, step, self.total)

    def finish_step(self, batch: Batch, record: StepRecord) -> dict[str, Any]:
        """The step's metrics (verl's names); a multi-turn step's first transcripts go to the run directory."""
        from rlflow.metrics import (
            compute_data_metrics,
            compute_rollout_metrics,
            compute_seqlen_metrics,
            compute_timing_metrics,
        )

        if "num_turns" in batch:
            self.run_dir.append_transcripts(transcripts(record.step, batch))
        metrics: dict[str, Any] = {"training/global_step": record.step, "training/epoch": record.epoch}
        metrics.update(batch.metrics)
        metrics.update(compute_seqlen_metrics(batch, self.devices))
        metrics.update(compute_rollout_metrics(batch))
        metrics.update(compute_data_metrics(batch))
        metrics.update(compute_timing_metrics(record.timing(), batch, n_gpus=self.devices))
        metrics.update(record.validation)
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
    def send_weights(self, stage: PlanStage, batch: Batch, step: int) -> tuple[Batch, TransferHandle | None]:
        """The weight-sync stage of ``step`` (policy version ``step``); the batch with its metrics, and the
        transfer submitted to a rollout on another pool (local, or a remote backend that takes weights)."""
        batch = self.executor.run_stage(stage, batch, step)  # "all" dispatch: only metrics come back
        if stage.resource_type == "remote":  # every forwarder learns the policy version it now serves
            self.executor.set_global_steps(stage, step)
        rollout = self.plan.first_with_role("rollout")
        if rollout is None or rollout.resource == stage.resource or rollout.resource_type not in ("local", "remote"):
            return batch, None
        return batch, self.executor.submit_transfer(stage, stage.resource, rollout.resource, step)

    def _save_checkpoint(self, step: int, stage: PlanStage) -> None:
        """Write step ``step``'s checkpoint to a temporary directory; ``commit_checkpoint`` renames it into
        place once the step's metrics are logged, so a committed step is never missing from metrics.jsonl
        (a failure in between resumes from the checkpoint before, whose later metrics are truncated)."""
        if stage.resource_type == DRIVER:
            raise ResumeError("the actor is updated on the driver; there is no model state to checkpoint")
        self.abort_checkpoint()  # a step has one checkpoint; an earlier one left pending is not the run's
        tmp = checkpoints.begin(self.run_dir.checkpoints, step)
        with self._checkpoint_faults(stage, step, tmp):
            for each in self.plan.on_every_checkpointed_pool(stage):
                self.executor.run_stage(each, Batch(), step, checkpoint_dir=str(tmp))
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


def _timer_name(stage: PlanStage) -> str:
    return stage.verl_timer or stage.name


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
