"""``separate_async``: the rollout samples the next steps' batches on its own resource while a step trains.

The staleness bound and the depth come from the plan (``Plan.staleness``). Design notes:
docs/design/separate_async.md.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlflow.batch import Batch
from rlflow.errors import ConfigError, ResumeError
from rlflow.metrics import off_policy_metrics
from rlflow.runtime.modes.base import TrainerMode, register_trainer
from rlflow.runtime.step_record import StepRecord

IN_FLIGHT_DIR = "in_flight"  # in a checkpoint: the batches sampled ahead of it
EVICTED = "training/off_policy/evicted_samples"


@dataclass
class Sampled:
    """A batch sampled (or being sampled) ahead, to train step ``step``, by policy ``version``."""

    step: int
    version: int
    epoch: int
    seq: int  # submission order on the rollout's resource
    handle: Any = None
    batch: Batch | None = None


@register_trainer("separate_async")
class SeparateAsyncMode(TrainerMode):
    def __init__(self, loop) -> None:
        super().__init__(loop)
        plan = loop.plan
        self.rollout = plan.first_with_role("rollout")
        if plan.staleness is None or not dict(plan.overlap).get(self.rollout.name):
            raise ConfigError(
                f"separate_async: the plan of {plan.pipeline_name!r} lets the rollout {self.rollout.name!r} run "
                "beside nothing of the step before it; bind it to a resource of its own"
            )
        self.before = tuple(
            s for s in self.sampling if s != self.rollout
        )  # stages ahead of the rollout (rare) run as the batch is sampled
        self.depth = plan.staleness.num_warmup_batches
        self.threshold = plan.staleness.max_off_policy_threshold
        self.strategy = plan.staleness.max_off_policy_strategy
        self.queue: deque[Sampled] = deque()
        self.transfers: list[tuple[int, Any]] = []  # (seq, pending weight transfer), oldest first
        self.seq = itertools.count()
        self.version = 0  # the policy version the next generate submitted will sample with
        self.next_step = 1  # the next step whose batch is to be sampled

    # ---- the step's parts and hooks ----------------------------------------------------------
    def on_init_end(self, start: int) -> None:
        self.version = start - 1  # the init phase synced the weights of the last step done
        self.next_step = self.queue[-1].step + 1 if self.queue else start  # after the batches a checkpoint held

    def sample(self, step: int, record: StepRecord) -> Batch:
        self._fill(step)
        with record.time(self.rollout.verl_timer or self.rollout.name):  # the time the trainer waited for it
            sampled, evicted = self._take(step)
        record.epoch = sampled.epoch
        batch = sampled.batch
        batch.metrics.update(off_policy_metrics(step, [sampled.version] * len(batch), evicted))
        batch.metrics.setdefault(EVICTED, 0)  # verl logs it only on a step that evicted: a gap, not a 0, on a plot
        return batch

    def on_weights_sent(self, step: int, batch: Batch, transfers: list) -> Batch:
        """The transfers queue on the rollout's resource behind its generate in flight: waited for later."""
        self.transfers += [(next(self.seq), transfer) for transfer in transfers]
        self.version = step
        self._fill(step)  # fresher weights may allow sampling further ahead
        return batch

    def on_step_end(self, step: int, metrics: dict[str, Any]) -> None:
        if step == self.loop.total:
            metrics.update(self._collect_transfers())
        super().on_step_end(step, metrics)

    # ---- sampling ahead -------------------------------------------------------------------------
    def _fill(self, current: int) -> None:
        """Submit generate for the steps after the last one sampled, up to ``depth`` ahead of ``current``."""
        while self.next_step <= min(self.loop.total, current + self.depth):
            if self.strategy == "wait" and not self._within(self.next_step, self.version):
                return
            self.queue.append(self._sample(self.next_step))
            self.next_step += 1

    def _sample(self, step: int) -> Sampled:
        """Draw the next prompts and submit generate on them, for ``step``, with the rollout's weights."""
        epoch = self.loop.epoch  # as the sync loop reports it: read before drawing
        batch = self.loop.draw(step)
        if self.before:
            batch, _ = self.loop.run_stages(self.before, batch, StepRecord(step, epoch))
        sampled = Sampled(step, self.version, epoch, next(self.seq))
        sampled.handle = self.loop.submit(self.rollout, batch, step)
        return sampled

    def _within(self, step: int, version: int) -> bool:
        return self.threshold is None or step - version <= self.threshold

    def _take(self, step: int) -> tuple[Sampled, list[int]]:
        """The oldest batch sampled ahead that ``step`` may train on; the spans of the groups evicted before it.

        As verl's replay buffer: a finished batch that would span too many versions is evicted and as
        many fresh prompts are sampled (its groups, a batch: ``_evict``); the next batch is taken instead.
        """
        evicted: list[int] = []
        while True:
            if not self.queue:  # nothing ahead (the bound allowed none): sample it now
                self._fill(step)
            sampled = self.queue.popleft()
            if sampled.step != step:  # pragma: no cover - the queue is filled in step order
                raise RuntimeError(f"separate_async: the batch of step {sampled.step} came up at step {step}")
            if sampled.batch is None:
                sampled.batch = self.loop.wait(sampled.handle)
            if self._within(step, sampled.version):
                break
            evicted.extend([step - sampled.version] * len(set(sampled.batch["uid"])))  # verl counts prompt groups
            self._evict(step)
        self._collect_transfers(before=sampled.seq, into=sampled.batch.metrics)
        return sampled, evicted

    def _evict(self, step: int) -> None:
        """A batch of ``step`` was evicted: each batch behind it trains a step earlier, and fresh prompts,
        sampled now with the newest weights, take the last place (the queue stays as deep)."""
        for later in self.queue:
            later.step -= 1
        self.queue.append(self._sample(self.queue[-1].step + 1 if self.queue else step))

    def _collect_transfers(self, before: int | None = None, into: dict | None = None) -> dict[str, float]:
        """Wait for the weight transfers submitted before ``before`` (all by default): they ran ahead of it."""
        metrics = {} if into is None else into
        for entry in list(self.transfers):
            seq, pending = entry
            if before is None or seq < before:
                metrics.update(self.loop.wait_transfer(pending))
                self.transfers.remove(entry)
        return metrics

    # ---- checkpoints ------------------------------------------------------------------------------
    def save_state(self, step: int, directory: Path) -> dict[str, Any]:
        import torch

        folder = directory / IN_FLIGHT_DIR
        folder.mkdir()
        saved = []
        for sampled in self.queue:
            if sampled.batch is None:
                sampled.batch = self.loop.wait(sampled.handle)
            name = f"step_{sampled.step}"
            torch.save(sampled.batch.tensors, folder / f"{name}.pt")
            try:
                text = json.dumps({"non_tensors": sampled.batch.non_tensors, "metrics": sampled.batch.metrics})
            except TypeError as exc:
                raise ResumeError(
                    f"the batch sampled ahead for step {sampled.step} holds a field that is not JSON ({exc}); "
                    "a stage kind that writes such a field cannot checkpoint in separate_async mode"
                ) from exc
            (folder / f"{name}.json").write_text(text)
            saved.append({"step": sampled.step, "version": sampled.version, "epoch": sampled.epoch})
        return {"in_flight": saved}

    def load_state(self, state: dict[str, Any], directory: Path) -> None:
        import torch

        self.queue.clear()
        for entry in state.get("in_flight", []):
            name = f"step_{int(entry['step'])}"
            tensors = torch.load(directory / IN_FLIGHT_DIR / f"{name}.pt", weights_only=True)
            rest = json.loads((directory / IN_FLIGHT_DIR / f"{name}.json").read_text())
            batch = Batch(tensors, rest["non_tensors"], rest["metrics"])
            self.queue.append(Sampled(int(entry["step"]), int(entry["version"]), int(entry["epoch"]), -1, batch=batch))

    def close(self) -> None:
        self.queue.clear()  # what is still in flight ends with the workers (the launcher stops the pools)
        self.transfers.clear()
