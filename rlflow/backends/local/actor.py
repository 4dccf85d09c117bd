"""The GRPO actor update: mini-batches, micro-batches with gradient accumulation, epochs, clipping.

Design decisions (each mirrors verl 0.9.1's engine workers, so metrics read the same):
- The loss is verl's: ``core_algos.compute_policy_loss_vanilla`` (PPO clip with dual clip),
  minus ``entropy_coeff`` x ``agg_loss(entropy)``, plus ``kl_loss_coef`` x
  ``agg_loss(kl_penalty(logp, ref, kl_loss_type))`` when ``use_kl_loss``. Its config is a
  real ``verl.workers.config.ActorConfig`` built from the pipeline's algorithm section.
  ``algorithm.rollout_correction`` as verl applies it: its importance weights
  (``rollout_is_weights``) multiply the policy loss and its rejection mask (``rollout_rs_mask``)
  is the loss mask; in bypass mode the old policy is the rollout's log-probs and the policy loss
  is verl's ``bypass_mode`` loss (PPO clip or REINFORCE against the rollout, with the rollout
  correction computed inside; its ``rollout_corr/*`` metrics average over micro-batches).
- Scaling is verl's global-batch normalisation: every micro-batch loss is divided by the
  mini-batch's *global* token count (or sequence count, by ``loss_agg_mode``) and multiplied
  by the data-parallel size; gradients are summed over micro-batches and averaged over
  ranks. The update is then the same however the mini-batch is split into micro-batches or
  ranks (up to float rounding).
- A mini-batch is ``ppo_mini_batch_size x n`` samples across all ranks; each rank splits its
  shard into as many mini-batches as the global batch needs, so every rank joins the same
  number of collectives even when shards differ by a row.
- A non-finite loss is never back-propagated: the ranks agree on it first (one all-reduce)
  and all raise ``StageError`` before that mini-batch's optimizer step. A non-finite gradient
  norm with a finite loss skips the step, as verl does.
- Metrics: ``pg_loss``/``kl_loss``/``entropy_loss``/``loss`` add up over micro-batches (they
  are parts of one global mean), ``pg_clipfrac``/``pg_clipfrac_lower``/``ppo_kl`` average over
  micro-batches; every metric then averages over mini-batches and epochs. The scheduler steps
  once per update and ``actor/lr`` is the learning rate after that step (verl's v1 engine).
- Micro-batches are ``ppo_micro_batch_size_per_gpu`` samples, or with ``use_dynamic_bsz`` at
  most ``ppo_max_token_len_per_gpu`` tokens each (``micro_batches``: verl's partition); the
  global-batch scaling above makes the gradients the same either way. With
  ``model.use_remove_padding`` each micro-batch runs packed (``logprob``).
- Precision: the model computes in ``model.dtype``. bf16/fp16 parameters on a GPU are stepped
  through fp32 master weights (``master_weights``: fp32 gradient accumulation and optimizer
  state); on the CPU parameters are stepped as they are. On a GPU the optimizer is torch's
  fused AdamW/Adam (one kernel for all parameters).
- Each mini-batch also reports ``perf/mfu/actor`` and ``actor/perf/*memory*`` as verl's engine
  workers do (see ``perf``), timed around the whole mini-batch (forwards, backwards, step) and
  averaged over ranks.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import torch

from rlflow.backends.local import distributed
from rlflow.backends.local.logprob import forward_log_probs
from rlflow.backends.local.master_weights import MasterWeights, needs_master_weights
from rlflow.backends.local.micro_batches import micro_batch_rows
from rlflow.backends.local.perf import peak_tflops, update_perf_metrics
from rlflow.batch import Batch, response_span
from rlflow.errors import BackendError, StageError

log = logging.getLogger("rlflow.backends.local")

SUMMED = ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "actor/loss")
AVERAGED = ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower")


def verl_actor_config(pipeline):
    """verl's ``ActorConfig`` carrying the pipeline's loss knobs (what verl's loss functions read)."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig

    a, t = pipeline.algorithm, pipeline.trainer
    rc = a.rollout_correction
    policy_loss = PolicyLossConfig(
        loss_mode="bypass_mode" if rc.bypass_mode else "vanilla",
        rollout_correction=RolloutCorrectionConfig(**rc.model_dump()),
    )
    return ActorConfig(
        strategy="fsdp",
        policy_loss=policy_loss,
        rollout_n=a.n,
        ppo_mini_batch_size=t.ppo_mini_batch_size,
        ppo_micro_batch_size_per_gpu=t.ppo_micro_batch_size_per_gpu or t.ppo_mini_batch_size * a.n,
        clip_ratio=a.clip_ratio,
        clip_ratio_low=a.clip_ratio_low,
        clip_ratio_high=a.clip_ratio_high,
        clip_ratio_c=a.clip_ratio_c,
        loss_agg_mode=a.loss_agg_mode,
        entropy_coeff=a.entropy_coeff,
        use_kl_loss=a.use_kl_loss,
        kl_loss_coef=a.kl_loss_coef,
        kl_loss_type=a.kl_loss_type,
        ppo_epochs=t.ppo_epochs,
        use_torch_compile=False,
    )


def loss_metric_names(config) -> tuple[str, ...]:
    """What the policy loss reports besides ``SUMMED``/``AVERAGED``, averaged over micro-batches.

    verl's ``bypass_mode`` loss adds its ``rollout_corr/*`` metrics, a set fixed by the config;
    every rank must all-reduce the same names in the same order (even a rank whose micro-batches
    are empty), so the set is read once from a call on one token rather than from the batches.
    """
    from verl.trainer.ppo import core_algos

    if config.policy_loss.loss_mode == "vanilla":
        return ()
    one, mask = torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool)
    _, metrics = core_algos.get_policy_loss_fn(config.policy_loss.loss_mode)(
        old_log_prob=one, log_prob=one, advantages=one, response_mask=mask, loss_agg_mode="token-mean", config=config
    )
    return tuple(sorted(k for k in metrics if k not in AVERAGED))


def loss_mask(batch: Batch) -> torch.Tensor:
    """The tokens the loss counts: the rollout rejection's mask when the advantage step made one."""
    return batch["rollout_rs_mask"] if "rollout_rs_mask" in batch else batch["response_mask"]


def build_optimizer(params: list[torch.nn.Parameter], optim) -> torch.optim.Optimizer:
    """The optimizer of ``trainer.optim``; Adam(W) is torch's fused implementation when the parameters are on a GPU."""
    fused = {"fused": True} if params and params[0].is_cuda else {}
    if optim.name == "adamw":
        return torch.optim.AdamW(
            params, lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay, **fused
        )
    if optim.name == "adam":
        return torch.optim.Adam(params, lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay, **fused)
    return torch.optim.SGD(params, lr=optim.lr, weight_decay=optim.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, optim, total_steps: int | None):
    """verl's warmup schedules; cosine needs the number of training steps."""
    from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

    if optim.lr_scheduler == "constant":
        return get_constant_schedule_with_warmup(optimizer, num_warmup_steps=optim.lr_warmup_steps)
    if not total_steps:
        raise BackendError(
            "trainer.optim.lr_scheduler: cosine needs the number of training steps; set trainer.total_steps "
            "(or let the runtime pass total_training_steps to the engine)"
        )
    return get_cosine_schedule_with_warmup(
        optimizer,
        num_warmup_steps=optim.lr_warmup_steps,
        num_training_steps=total_steps,
        min_lr_ratio=optim.min_lr_ratio,
    )


class Actor:
    """Owns the policy's optimizer and scheduler and runs ``update``."""

    keeps_master_weights = True  # a subclass whose engine keeps its own fp32 weights turns this off

    def __init__(self, model, pipeline, *, world_size: int = 1, total_training_steps: int | None = None) -> None:
        self.model = model
        self.pipeline = pipeline
        self.world_size = world_size
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.master = (
            MasterWeights(self.params) if self.keeps_master_weights and needs_master_weights(self.params) else None
        )
        self.stepped = self.master.master if self.master else self.params  # what the optimizer updates
        self.optimizer = build_optimizer(self.stepped, pipeline.trainer.optim)
        self.scheduler = build_scheduler(
            self.optimizer, pipeline.trainer.optim, total_training_steps or pipeline.trainer.total_steps
        )
        self.loss_config = verl_actor_config(pipeline)
        self.device = next(model.parameters()).device
        self.model_config = model.config  # the Hugging Face config verl's FLOPs formulas read
        self.peak_tflops = peak_tflops(self.device)
        self.packed = pipeline.model.use_remove_padding
        self.bypass = pipeline.algorithm.rollout_correction.bypass_mode
        self.averaged = AVERAGED + loss_metric_names(self.loss_config)

    # ---- one update -------------------------------------------------------------------------
    def update(
        self, batch: Batch, *, temperature: float = 1.0, step: int = 0, stage: str = "update_actor"
    ) -> dict[str, float]:
        a, t = self.pipeline.algorithm, self.pipeline.trainer
        if a.use_kl_loss and "ref_log_prob" not in batch:
            raise BackendError(
                f"step {step}, stage {stage!r}: use_kl_loss needs ref_log_prob in the batch; "
                f"add a ref_log_prob stage before update_actor"
            )
        total_rows = int(
            distributed.all_reduce(torch.tensor([float(len(batch))], device=self.device), self.world_size).item()
        )
        num_mini = max(1, math.ceil(total_rows / (t.ppo_mini_batch_size * a.n)))
        self.model.train()
        history: list[dict[str, float]] = []
        for epoch in range(t.ppo_epochs):
            for index, mini in enumerate(batch.split(num_mini)):
                start = time.perf_counter()
                metrics = self._mini_batch(mini, temperature, where=(step, stage, epoch, index))
                history.append({**metrics, **self._perf_metrics(mini, time.perf_counter() - start)})
        self.scheduler.step()
        metrics = {k: sum(h[k] for h in history) / len(history) for k in history[0]}
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        if a.use_kl_loss:
            metrics["actor/kl_coef"] = a.kl_loss_coef
        return metrics

    def _perf_metrics(self, mini: Batch, seconds: float) -> dict[str, float]:
        """verl's per-mini-batch MFU (over every rank's sequences) and memory, averaged over ranks.

        verl reports its first rank's readings; the average keeps every rank's metrics equal, as
        all of this actor's metrics are.
        """
        local = (
            (mini["prompt_mask"].sum(-1) + response_span(mini["response_mask"]).sum(-1)).tolist() if len(mini) else []
        )
        seqlens = distributed.all_gather_ints(local, self.world_size)
        mine = update_perf_metrics(self.model_config, self.device, self.peak_tflops, seqlens, seconds, self.world_size)
        values = torch.tensor(list(mine.values()), dtype=torch.float64, device=self.device)
        return dict(zip(mine, distributed.all_reduce(values, self.world_size, op="mean").tolist()))

    def _set_global_batch_info(self, mini: Batch) -> None:
        """Tell verl's loss aggregation the mini-batch's size over every data-parallel rank."""
        counts = torch.tensor(
            [float(len(mini)), float(loss_mask(mini).sum()) if len(mini) else 0.0], device=self.device
        )
        rows, tokens = distributed.all_reduce(counts, self.world_size).tolist()
        info = self.loss_config.global_batch_info
        info.update(
            dp_size=self.world_size,
            batch_num_tokens=max(tokens, 1.0),
            global_batch_size=max(rows, 1.0),
            loss_scale_factor=self.loss_config.loss_scale_factor,
        )

    def _mini_batch(self, mini: Batch, temperature: float, where: tuple) -> dict[str, float]:
        self._set_global_batch_info(mini)
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(self._metric_names(), 0.0)
        micro_count, bad = 0, None
        for j, rows in enumerate(self.micro_batch_rows(mini)):
            loss, parts = self._micro_loss(mini.index(rows), temperature)
            if not torch.isfinite(loss):
                bad = (j, float(loss.detach()), parts)
                break
            loss.backward()
            if self.master is not None:
                self.master.gather_grads()
            micro_count += 1
            for k, v in parts.items():
                sums[k] += v
        self._raise_if_bad(bad, where)
        distributed.average_gradients(self.stepped, self.world_size)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.stepped, max_norm=self.pipeline.trainer.grad_clip)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
            if self.master is not None:
                self.master.copy_to_model()
        else:
            log.warning("step %s: gradient norm is %s; skipping this mini-batch's optimizer step", where[0], grad_norm)
        self.optimizer.zero_grad(set_to_none=True)
        return self._reduce_metrics(sums, micro_count, float(grad_norm))

    def _metric_names(self) -> tuple[str, ...]:
        return SUMMED + self.averaged

    def micro_batch_rows(self, mini: Batch, min_count: int = 1) -> list[list[int]]:
        """The rows of each micro-batch of ``mini``: ``ppo_micro_batch_size_per_gpu`` samples, or a token budget."""
        t = self.pipeline.trainer
        return micro_batch_rows(
            mini,
            micro_batch_size=t.ppo_micro_batch_size_per_gpu,
            max_token_len=t.ppo_max_token_len_per_gpu if t.use_dynamic_bsz else None,
            keep_groups=not self.packed,
            min_count=min_count,
        )

    def _raise_if_bad(self, bad: tuple | None, where: tuple) -> None:
        flag = torch.tensor([0.0 if bad is None else 1.0], device=self.device)
        if float(distributed.all_reduce(flag, self.world_size, op="max").item()) == 0.0:
            return
        self.optimizer.zero_grad(set_to_none=True)
        step, stage, epoch, index = where
        detail = (
            "on another rank"
            if bad is None
            else (f"in micro-batch {bad[0]}: loss={bad[1]}, " + ", ".join(f"{k}={v:.6g}" for k, v in bad[2].items()))
        )
        raise StageError(
            f"step {step}, stage {stage!r}: non-finite actor loss in epoch {epoch}, mini-batch {index} {detail}; "
            f"no optimizer step was applied for it. Check the rewards and advantages for NaN/inf, "
            f"or lower trainer.optim.lr"
        )

    def _micro_loss(self, micro: Batch, temperature: float) -> tuple[torch.Tensor, dict[str, float]]:
        from verl.trainer.ppo import core_algos

        cfg, a = self.loss_config, self.pipeline.algorithm
        mask = loss_mask(micro).to(self.device).bool()
        log_prob, entropy = forward_log_probs(
            self.model,
            micro["prompts"],
            micro["prompt_mask"],
            micro["responses"],
            micro["response_mask"],
            temperature=temperature,
            with_entropy=a.entropy_coeff != 0,
            packed=self.packed,
        )
        weights = micro["rollout_is_weights"].to(self.device) if "rollout_is_weights" in micro else None
        pg_loss, pg_metrics = core_algos.get_policy_loss_fn(cfg.policy_loss.loss_mode)(
            old_log_prob=micro["rollout_log_probs" if self.bypass else "old_log_probs"].to(self.device),
            log_prob=log_prob,
            advantages=micro["advantages"].to(self.device),
            response_mask=mask,
            loss_agg_mode=cfg.loss_agg_mode,
            config=cfg,
            rollout_is_weights=weights,
        )
        loss = pg_loss
        parts = {"actor/pg_loss": float(pg_loss.detach()), **pg_metrics}
        if entropy is not None:
            entropy_loss = core_algos.agg_loss(entropy, mask, cfg.loss_agg_mode, **cfg.global_batch_info)
            loss = loss - a.entropy_coeff * entropy_loss
            parts["actor/entropy_loss"] = float(entropy_loss.detach())
        if a.use_kl_loss:
            kld = core_algos.kl_penalty(log_prob, micro["ref_log_prob"].to(self.device), a.kl_loss_type)
            kl_loss = core_algos.agg_loss(kld, mask, cfg.loss_agg_mode, **cfg.global_batch_info)
            loss = loss + kl_loss * a.kl_loss_coef
            parts["actor/kl_loss"] = float(kl_loss.detach())
        parts["actor/loss"] = float(loss.detach())
        return loss, parts

    def _reduce_metrics(self, sums: dict[str, float], micro_count: int, grad_norm: float) -> dict[str, float]:
        a = self.pipeline.algorithm
        names = self._metric_names()
        values = torch.tensor([sums[k] for k in names] + [float(micro_count)], dtype=torch.float64, device=self.device)
        values = distributed.all_reduce(values, self.world_size).tolist()
        count = max(values[-1], 1.0)
        out = {k: v / self.world_size for k, v in zip(SUMMED, values[: len(SUMMED)])}
        out.update({k: v / count for k, v in zip(self.averaged, values[len(SUMMED) : -1])})
        if not a.use_kl_loss:
            out.pop("actor/kl_loss")
        if a.entropy_coeff == 0:
            out.pop("actor/entropy_loss")
        out["actor/grad_norm"] = grad_norm
        return out

    # ---- checkpoint state -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        if self.master is not None:
            state["master_weights"] = self.master.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.master is not None:
            if "master_weights" in state:
                self.master.load_state_dict(state["master_weights"])
            else:  # a checkpoint without them (written in fp32, or elsewhere): start from the loaded model
                self.master.load_state_dict([p.detach().float() for p in self.params])
