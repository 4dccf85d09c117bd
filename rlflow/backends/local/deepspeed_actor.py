"""DeepSpeed training engine for ``update_actor`` (``with: {engine: deepspeed, zero_stage: 0..3}``).

``DeepSpeedActor`` is the torch ``Actor`` with DeepSpeed doing the data-parallel part: the loss, its scaling, the
mini-batch split and the metrics are inherited, so both engines optimise and report the same. deepspeed is
imported inside functions. Design notes: docs/design/local_actor.md.
"""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path
from typing import Any

import torch

from rlflow.backends.local import distributed
from rlflow.backends.local.actor import Actor
from rlflow.backends.local.logprob import forward_log_probs, log_probs_by_parts
from rlflow.batch import Batch
from rlflow.errors import BackendError

CHECKPOINT_DIR = "deepspeed"
_NEVER_PRINT = 1 << 30
DEFAULT_BUCKET = 500_000_000  # DeepSpeed's own default bucket size, in elements


def ds_config(
    pipeline,
    *,
    world_size: int,
    zero_stage: int,
    num_params: int = DEFAULT_BUCKET,
    mini_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    grad_clip: float | None = None,
    dtype: str | None = None,
) -> dict[str, Any]:
    """DeepSpeed's config for the pipeline's batch sizes, clipping, dtype and ZeRO stage: the actor's, or the
    sizes, clipping and dtype given (the critic's).

    Communication buckets are capped at the model's size: DeepSpeed's default (5e8 elements,
    2 GB in fp32) is allocated up front, and under deterministic algorithms torch fills every
    fresh buffer, which alone costs seconds per update on a CPU for a small model.
    """
    t, a = pipeline.trainer, pipeline.algorithm
    bucket = int(max(1, min(DEFAULT_BUCKET, num_params)))
    bucket += bucket % 2  # ZeRO-1/2 want an even bucket (an odd parameter count: a critic's one-output head)
    rows_per_rank = max(1, math.ceil((mini_batch_size or t.ppo_mini_batch_size) * a.n / world_size))
    micro = min(micro_batch_size or t.ppo_micro_batch_size_per_gpu or rows_per_rank, rows_per_rank)
    dtype = dtype or pipeline.model.dtype
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": max(1, math.ceil(rows_per_rank / micro)),
        "gradient_clipping": grad_clip or t.grad_clip,
        "zero_optimization": {
            "stage": zero_stage,
            "reduce_bucket_size": bucket,
            "allgather_bucket_size": bucket,
            **({"stage3_prefetch_bucket_size": bucket} if zero_stage == 3 else {}),
        },
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": dtype == "bfloat16"},
        "fp16": {"enabled": dtype == "float16"},
        "steps_per_print": _NEVER_PRINT,
        "wall_clock_breakdown": False,
    }


def init_deepspeed_distributed(rank: int, world_size: int, device: torch.device, dist: dict | None) -> None:
    """Point DeepSpeed at the runtime's process group (see the module docstring)."""
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if world_size > 1 and not (dist and "master_addr" in dist and "master_port" in dist):
        raise BackendError(
            f"deepspeed engine rank {rank}/{world_size}: data parallelism needs "
            f"dist={{'master_addr', 'master_port'}} from the runtime; got {sorted(dist or {})}"
        )
    addr, port = (dist["master_addr"], dist["master_port"]) if dist else ("127.0.0.1", _free_port())
    os.environ.update(
        MASTER_ADDR=str(addr),
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(torch.cuda.current_device() if device.type == "cuda" else 0),
    )
    import deepspeed

    if device.type == "cpu":
        _skip_shm_comm_op()
    deepspeed.init_distributed(
        dist_backend="nccl" if device.type == "cuda" else "gloo",
        rank=rank,
        world_size=world_size,
        auto_mpi_discovery=False,
        verbose=False,
    )


def _skip_shm_comm_op() -> None:
    """Don't compile DeepSpeed's CPU shared-memory all-reduce op: only its inference all-reduce uses it.

    DeepSpeed builds the op when its communication backend starts, a C++ compile of half a
    minute on an idle machine (minutes on a busy one) whose interrupted build leaves a lock
    that blocks every later start. Training reduces through gloo either way; DeepSpeed
    reads op compatibility from this dict and skips ops marked incompatible.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def agreed_count(local: int, world_size: int, device: torch.device) -> int:
    """The largest count over ranks (at least one), so every rank joins as many collectives."""
    value = torch.tensor([float(local)], device=device)
    return max(1, int(distributed.all_reduce(value, world_size, op="max").tolist()[0]))


def agreed_even_rows(rows: int, micro_batch_size: int | None, world_size: int, device: torch.device) -> list[list[int]]:
    """``rows`` split evenly into as many micro-batches of at most ``micro_batch_size`` as the busiest rank has."""
    count = agreed_count(math.ceil(rows / (micro_batch_size or max(rows, 1))), world_size, device)
    return [list(range(rows * p // count, rows * (p + 1) // count)) for p in range(count)]


class DeepSpeedCheckpoint:
    """The checkpoint state of a model DeepSpeed trains (``engine``, ``scheduler``): the schedule in the trainer
    state, the module and optimizer in DeepSpeed's own checkpoint under ``CHECKPOINT_DIR``."""

    engine: Any
    scheduler: Any

    def state_dict(self) -> dict[str, Any]:
        """The schedule only: the optimizer state is DeepSpeed's (``save_checkpoint``)."""
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state["scheduler"])

    def save_checkpoint(self, path: str | Path, global_steps: int) -> Path:
        """DeepSpeed's checkpoint of module and optimizer (every rank must call it)."""
        out = Path(path) / CHECKPOINT_DIR
        self.engine.save_checkpoint(str(out), tag=f"global_step{int(global_steps)}", save_latest=True)
        return out

    def load_checkpoint(self, path: str | Path) -> None:
        src = Path(path) / CHECKPOINT_DIR
        if not (src / "latest").exists():
            raise BackendError(
                f"checkpoint {path}: no DeepSpeed state in {src} (no 'latest' file); it was written "
                f"by another engine: resume with update_actor.with.engine as it was"
            )
        loaded, _ = self.engine.load_checkpoint(str(src), load_optimizer_states=True, load_lr_scheduler_states=False)
        if loaded is None:
            raise BackendError(f"checkpoint {path}: DeepSpeed could not load {src}; see the worker's log")


class DeepSpeedActor(DeepSpeedCheckpoint, Actor):
    """The torch actor's update, with DeepSpeed's engine doing backward, reduction, clipping and step."""

    keeps_master_weights = False

    def __init__(
        self,
        model,
        pipeline,
        *,
        rank: int,
        world_size: int,
        device: torch.device,
        dist: dict | None,
        zero_stage: int,
        total_training_steps: int | None = None,
    ) -> None:
        if not 0 <= zero_stage <= 3:
            raise BackendError(f"update_actor.with.zero_stage: {zero_stage} is not a ZeRO stage; use 0, 1, 2 or 3")
        init_deepspeed_distributed(rank, world_size, device, dist)
        super().__init__(model, pipeline, world_size=world_size, total_training_steps=total_training_steps)
        import deepspeed

        self.zero_stage = zero_stage
        self.config = ds_config(
            pipeline,
            world_size=world_size,
            zero_stage=zero_stage,
            num_params=sum(p.numel() for p in model.parameters()),
        )
        self.engine, _, _, _ = deepspeed.initialize(
            model=model, optimizer=self.optimizer, config=self.config, dist_init_required=False
        )
        self.model = self.engine  # forwards go through DeepSpeed (ZeRO-3 gathers in its hooks)
        self.module = model

    # ---- one mini-batch ---------------------------------------------------------------------
    def _mini_batch(self, mini: Batch, temperature: float, where: tuple) -> dict[str, float]:
        self._set_global_batch_info(mini)
        t = self.pipeline.trainer
        micros = [
            mini.index(rows)
            for rows in self._agreed_rows(
                mini, t.ppo_micro_batch_size_per_gpu, t.ppo_max_token_len_per_gpu if t.use_dynamic_bsz else None
            )
        ]
        sums = dict.fromkeys(self._metric_names(), 0.0)
        micro_count, bad = 0, None
        for j, micro in enumerate(micros):
            self.engine.set_gradient_accumulation_boundary(j == len(micros) - 1)
            loss, parts = self._micro_loss(micro, temperature) if len(micro) else (None, None)
            if loss is not None and not torch.isfinite(loss):
                bad, loss = bad or (j, float(loss), parts), None
            if loss is None:
                loss = self._zero_loss(micro, temperature)
            else:
                micro_count += 1
                for k, v in parts.items():
                    sums[k] += v
            self.engine.backward(loss, scale_wrt_gas=False)
        self._raise_if_bad(bad, where)
        self.engine.step()
        grad_norm = self.engine.get_global_grad_norm()
        return self._reduce_metrics(sums, micro_count, float(grad_norm) if grad_norm is not None else float("nan"))

    def _agreed_rows(self, batch: Batch, micro_batch_size: int | None, max_token_len: int | None) -> list[list[int]]:
        """Row indices of each micro-batch, as many micro-batches on every rank (some maybe empty)."""
        if max_token_len is None:
            return agreed_even_rows(len(batch), micro_batch_size, self.world_size, self.device)
        count = 1
        while True:
            rows = self._token_rows(batch, max_token_len, count)
            agreed = agreed_count(len(rows), self.world_size, self.device)
            if agreed == count:
                return rows
            count = agreed

    def _token_rows(self, batch: Batch, max_token_len: int, count: int) -> list[list[int]]:
        from rlflow.backends.local.micro_batches import micro_batch_rows

        return micro_batch_rows(
            batch, micro_batch_size=None, max_token_len=max_token_len, keep_groups=not self.packed, min_count=count
        )

    def _zero_loss(self, micro: Batch, temperature: float) -> torch.Tensor:
        """A loss with zero gradient that still runs the forward (and DeepSpeed's hooks) once."""
        if len(micro) == 0:
            one = torch.zeros((1, 1), dtype=torch.long)
            micro = Batch(
                {
                    "prompts": one,
                    "prompt_mask": torch.ones_like(one),
                    "responses": one,
                    "response_mask": torch.ones_like(one),
                }
            )
        log_prob, _ = forward_log_probs(
            self.model,
            micro["prompts"],
            micro["prompt_mask"],
            micro["responses"],
            micro["response_mask"],
            temperature=temperature,
            packed=self.packed,
        )
        return (log_prob.nan_to_num(0.0) * 0.0).sum()

    # ---- log-probs --------------------------------------------------------------------------
    @torch.no_grad()
    def log_probs(
        self,
        batch: Batch,
        *,
        micro_batch_size: int | None,
        temperature: float,
        with_entropy: bool,
        max_token_len: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropy) through DeepSpeed's module, the same number of forwards on every rank."""
        self.engine.eval()
        return log_probs_by_parts(
            self.model,
            batch,
            self._agreed_rows(batch, micro_batch_size, max_token_len),
            temperature=temperature,
            with_entropy=with_entropy,
            packed=self.packed,
            on_empty=lambda: self._zero_loss(Batch({}), temperature),
        )

    # ---- weights ----------------------------------------------------------------------------
    def dense_state_dict(self) -> dict[str, torch.Tensor]:
        """The full trained weights on the training device; under ZeRO-3 a gather every rank must join."""
        if self.zero_stage < 3:
            return {k: v.detach() for k, v in self.module.state_dict().items()}
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(self.module.parameters()), modifier_rank=None):
            return {k: v.detach().clone() for k, v in self.module.state_dict().items()}
