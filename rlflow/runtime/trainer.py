"""The step loop: runs a compiled Plan on started pools in PPOTrainerSync's order.

Init phase: load the checkpoint when resuming, sync weights to the rollout (verl syncs
before the first generation; traced as step 0), validate when ``val_before_train`` (fresh
runs only, so a resumed run never logs a step twice). Then each step runs the plan's
stages; ``save_checkpoint`` and ``validate`` run when their cadence hits. Metrics carry
verl's names and go to every sink; each stage execution becomes a trace record.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlflow.batch import Batch
from rlflow.errors import ResumeError, StageError
from rlflow.runtime import checkpoints, interrupts
from rlflow.runtime.dispatch import Dispatcher
from rlflow.runtime.run_dir import RunDir
from rlflow.runtime.sinks import StepTimer

log = logging.getLogger("rlflow.runtime")
STEP_TIMERS = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "save_checkpoint", "update_weights")


@dataclass
class DataState:
    """The driver's data: tokenizer, datasets and the train sampler (checkpointed for exact resume)."""

    tokenizer: Any
    train: Any
    val: Any
    sampler: Any


def load_data(spec, root: Path) -> DataState:
    from rlflow.backends.local.models import load_tokenizer
    from rlflow.data import load_split

    tokenizer = load_tokenizer(spec.model, root)
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


def due(freq: int, step: int, last: int) -> bool:
    return freq > 0 and (step % freq == 0 or step == last)


class StepLoop:
    """One attempt at training: from ``start_step`` to the last step, on started pools."""

    def __init__(self, spec, plan, pools: dict, run_dir: RunDir, data: DataState, resolved_yaml: str, sinks: list,
                 attempt: int = 0) -> None:
        self.spec = spec
        self.plan = plan
        self.pools = pools
        self.run_dir = run_dir
        self.data = data
        self.resolved_yaml = resolved_yaml
        self.sinks = sinks
        self.dispatch = Dispatcher(pools, spec, run_dir.append_trace, str(run_dir.path), attempt)
        self.total = total_steps(spec, data)
        self.by_kind = {s.kind: s for s in plan.step}
        actor = self.by_kind["update_actor"].resource
        self.actor_pool = pools.get(actor)

    # ---- init -------------------------------------------------------------------------
    def init(self, resume_from: Path | None) -> int:
        """Run the init phase; returns the first step to train."""
        start = 1
        for stage in self.plan.init:
            if stage.kind == "load_checkpoint":
                if resume_from is not None:
                    start = self._load_checkpoint(resume_from, stage) + 1
            elif stage.kind == "sync_weights":
                self._sync_weights(stage, Batch(), 0 if start == 1 else start - 1)
            elif stage.kind == "validate" and resume_from is None and self.spec.trainer.val_before_train:
                self.log_metrics(0, self._validate(stage, 0))
        return start

    def _load_checkpoint(self, path: Path, stage) -> int:
        state = checkpoints.read_state(path)
        step = int(state["global_step"])
        self.data.sampler.load_state_dict(state["sampler"])
        self._actor_call("load_checkpoint", str(path), step=0, label="load_checkpoint", stage=stage)
        log.info("resumed from %s (step %d)", path, step)
        return step

    # ---- steps ------------------------------------------------------------------------
    def train(self, start: int) -> dict[str, Any]:
        last: dict[str, Any] = {}
        for step in range(start, self.total + 1):
            last = self.run_step(step)
            self.log_metrics(step, last)
        return last

    def run_step(self, step: int) -> dict[str, Any]:
        timer = StepTimer()
        epoch = self.data.sampler.epoch
        batch = self.data.train.to_batch(self.data.sampler.next_indices(), self.data.tokenizer.pad_token_id, step=step)
        val_metrics: dict[str, Any] = {}
        timing_end: float | None = None  # timing_s/step covers verl's steps 1-10, not validation
        step_start = time.perf_counter()
        for stage in self.plan.step:
            interrupts.raise_if_requested()
            if stage.cadence == "save_freq" and not due(self.spec.trainer.save_freq, step, self.total):
                continue
            if stage.cadence == "test_freq" and not due(self.spec.trainer.test_freq, step, self.total):
                continue
            if stage.kind == "validate":
                timing_end = time.perf_counter()
                with timer.time("testing"):
                    val_metrics = self._validate(stage, step)
                continue
            with timer.time(stage.verl_timer or stage.name):
                if stage.kind == "save_checkpoint":
                    self._save_checkpoint(step, stage)
                elif stage.kind == "sync_weights":
                    self._sync_weights(stage, batch, step)
                else:
                    batch = self.dispatch.run_stage(stage, batch, step)
        timing = dict(timer.timing)
        timing["step"] = (timing_end or time.perf_counter()) - step_start
        return self._step_metrics(step, epoch, batch, timing, val_metrics)

    def _step_metrics(self, step: int, epoch: int, batch: Batch, timing: dict, val_metrics: dict) -> dict[str, Any]:
        from rlflow.metrics import compute_data_metrics, compute_timing_metrics

        metrics: dict[str, Any] = {"training/global_step": step, "training/epoch": epoch}
        metrics.update(batch.metrics)
        metrics.update(compute_data_metrics(batch, self.spec.data.max_response_length, self.spec.data.max_prompt_length))
        metrics.update({f"timing_s/{k}": v for k, v in timing.items()})
        devices = len(self.actor_pool.workers) if self.actor_pool is not None else 1  # verl's perf is per GPU
        metrics.update(compute_timing_metrics(timing, batch, n_gpus=devices))
        metrics.update(val_metrics)
        return metrics

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **metrics}
        self.run_dir.append_metrics(record)
        for sink in self.sinks:
            sink.log(step, metrics)

    # ---- weight sync, checkpoints, validation -------------------------------------------
    def _sync_weights(self, stage, batch: Batch, step: int) -> None:
        self.dispatch.run_stage(stage, batch, step)  # "all" dispatch: metrics land in batch.metrics
        rollout = self.by_kind["generate"].resource
        if rollout != stage.resource and self.pools[rollout].type == "local":
            self._cross_pool_sync(self.pools[stage.resource], self.pools[rollout], batch, step, stage)

    def _cross_pool_sync(self, source, target, batch: Batch, step: int, stage) -> None:
        refs = self.dispatch.wait([source.workers[0].export_weights_ref.remote()], stage, source, source.workers[:1])
        self.dispatch.trace([self.dispatch.record(step, "export_weights", source.name, refs[0])])
        results = self.dispatch.wait(
            [w.load_weights_from.remote(refs[0]["result"]) for w in target.workers], stage, target, target.workers
        )
        self.dispatch.trace([self.dispatch.record(step, stage.name, target.name, r) for r in results])
        merged = Batch.concat([Batch(metrics=r["result"]) for r in results])
        batch.metrics.update(merged.metrics)

    def _actor_call(self, method: str, *args: Any, step: int, label: str, stage) -> list:
        pool = self.actor_pool
        if pool is None:
            raise ResumeError("update_actor runs on the driver; there is no model state to checkpoint")
        workers = pool.workers[:1] if pool.type == "remote" else pool.workers
        return self.dispatch.call(pool, method, *args, stage=stage, step=step, label=label, workers=workers)

    def _save_checkpoint(self, step: int, stage) -> None:
        tmp = checkpoints.begin(self.run_dir.checkpoints, step)
        try:
            self._actor_call("save_checkpoint", str(tmp), step, step=step, label=stage.name, stage=stage)
            (tmp / "pipeline.resolved.yaml").write_text(self.resolved_yaml)
            state = {"global_step": step, "sampler": self.data.sampler.state_dict(), "pipeline": self.spec.name}
            checkpoints.commit(self.run_dir.checkpoints, tmp, step, state, self.spec.trainer.keep_checkpoints)
        except (StageError, OSError) as exc:
            checkpoints.abort(tmp)
            full = checkpoints.disk_full_reason(self.run_dir.checkpoints, exc)
            if full:
                raise StageError(f"stage {stage.name!r} at step {step}: {full}") from exc
            raise
        except BaseException:
            checkpoints.abort(tmp)
            raise

    def _validate(self, stage, step: int) -> dict[str, Any]:
        from rlflow.stages.impl.validate import val_metrics

        if self.data.val is None or len(self.data.val) == 0:
            return {}
        vcfg = stage.config
        gen = self.by_kind["generate"]
        reward = next(s for s in self.plan.step if s.verl_timer == "reward")
        gen_config = {**gen.config, "do_sample": vcfg["do_sample"], "temperature": vcfg["temperature"],
                      "top_p": vcfg["top_p"], "n": vcfg["n"]}
        batch = self.data.val.to_batch(list(range(len(self.data.val))), self.data.tokenizer.pad_token_id, step=-1)
        batch = self.dispatch.run_stage(gen, batch, step, config=gen_config, trace_as="validate")
        batch = self.dispatch.run_stage(reward, batch, step, trace_as="validate")
        return val_metrics(batch, vcfg["n"])
