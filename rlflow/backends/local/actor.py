"""The GRPO actor update: mini-batches, micro-batches with gradient accumulation, epochs, clipping.

Each choice mirrors verl 0.9.1's engine workers (the loss and its global-batch scaling, the mini-batch split,
the metrics), so metrics read the same. Design notes: docs/design/local_actor.md.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import torch

from rlflow.backends.local import distillation_loss as distill
from rlflow.backends.local import distributed
from rlflow.backends.local.logprob import forward_log_probs
from rlflow.backends.local.master_weights import MasterWeights, needs_master_weights
from rlflow.backends.local.micro_batches import micro_batch_rows, mini_batches
from rlflow.backends.local.perf import peak_tflops, update_perf_metrics
from rlflow.batch import Batch, response_span
from rlflow.errors import BackendError, StageError

log = logging.getLogger("rlflow.backends.local")

SUMMED = ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "actor/loss")
AVERAGED = ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower")


def verl_actor_config(pipeline):
    """verl's ``ActorConfig`` carrying the pipeline's loss knobs (what verl's loss functions read)."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config import ActorConfig, PolicyLossConfig

    a, t = pipeline.algorithm, pipeline.trainer
    rc = a.rollout_correction
    policy_loss = PolicyLossConfig(
        loss_mode=a.loss_mode,
        rollout_correction=RolloutCorrectionConfig(**rc.model_dump()),
        clip_cov_ratio=a.clip_cov_ratio,
        clip_cov_lb=a.clip_cov_lb,
        clip_cov_ub=a.clip_cov_ub,
        kl_cov_ratio=a.kl_cov_ratio,
        ppo_kl_coef=a.ppo_kl_coef,
        dro_beta=a.dro_beta,
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
        tau_pos=a.tau_pos,
        tau_neg=a.tau_neg,
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
        # host-side counts need the device only for a collective: one rank keeps them on the host (no sync)
        self.collective_device = self.device if world_size > 1 else torch.device("cpu")
        self.model_config = model.config  # the Hugging Face config verl's FLOPs formulas read
        self.peak_tflops = peak_tflops(self.device)
        self.packed = pipeline.model.use_remove_padding
        self.bypass = pipeline.algorithm.rollout_correction.bypass_mode
        # on-policy distillation: verl's DistillationLossConfig, and its metrics (summed: the loss; the rest averaged)
        d = pipeline.distillation
        self.distill = distill.verl_loss_config(d.distillation_loss) if d.enabled else None
        self.summed = SUMMED + (("distillation/loss",) if self.distill else ())
        self.averaged = AVERAGED + loss_metric_names(self.loss_config)
        if self.distill is not None:
            self.averaged += distill.metric_names(self.distill, self.loss_config)
        self.loss_metric_keys: set[str] = set()  # the pg metrics the chosen policy loss reports

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
        if self.distill is not None and "teacher_logprobs" not in batch:
            raise BackendError(
                f"step {step}, stage {stage!r}: distillation is enabled but the batch has no teacher_logprobs; "
                f"add a teacher_log_prob stage before update_actor"
            )
        total_rows = int(
            distributed.all_reduce(
                torch.tensor([float(len(batch))], device=self.collective_device), self.world_size
            ).item()
        )
        minis = mini_batches(batch, total_rows, t.ppo_mini_batch_size * a.n, self.world_size)
        self.model.train()
        history: list[dict[str, float]] = []
        for epoch in range(t.ppo_epochs):
            for index, mini in enumerate(minis):
                start = time.perf_counter()
                metrics = self._mini_batch(mini, temperature, where=(step, stage, epoch, index))
                history.append({**metrics, **self._perf_metrics(mini, time.perf_counter() - start)})
        self.scheduler.step()
        metrics = {k: sum(h[k] for h in history) / len(history) for k in history[0]}
        for key in set(AVERAGED) - self.loss_metric_keys:
            metrics.pop(key, None)
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
        values = torch.tensor(list(mine.values()), dtype=torch.float64, device=self.collective_device)
        return dict(zip(mine, distributed.all_reduce(values, self.world_size, op="mean").tolist()))

    def _set_global_batch_info(self, mini: Batch) -> None:
        """Tell verl's loss aggregation the mini-batch's size over every data-parallel rank.

        The sequence count is the full mini-batch's even for a shorter last one, as in verl (whose
        padding rows count as sequences); the token count is the real tokens (padding has none).
        """
        counts = torch.tensor(
            [float(len(mini)), float(loss_mask(mini).sum()) if len(mini) else 0.0], device=self.collective_device
        )
        rows, tokens = distributed.all_reduce(counts, self.world_size).tolist()
        info = self.loss_config.global_batch_info
        info.update(
            dp_size=self.world_size,
            batch_num_tokens=max(tokens, 1.0),
            global_batch_size=max(rows, float(self.pipeline.trainer.ppo_mini_batch_size * self.pipeline.algorithm.n)),
            loss_scale_factor=self.loss_config.loss_scale_factor,
        )

    def _mini_batch(self, mini: Batch, temperature: float, where: tuple) -> dict[str, float]:
        """Forwards and backwards of the micro-batches, then one read of the device: the loss check, norm, metrics."""
        self._set_global_batch_info(mini)
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, Any] = dict.fromkeys(self._metric_names(), 0.0)
        losses, micro_parts = [], []
        for rows in self.micro_batch_rows(mini):
            loss, parts = self._micro_loss(mini.index(rows), temperature)
            loss.backward()  # a non-finite loss is caught below, before any optimizer step
            if self.master is not None:
                self.master.gather_grads()
            losses.append(loss.detach())
            micro_parts.append(parts)
            for k, v in parts.items():
                sums[k] = sums[k] + v
        losses_t = torch.stack(losses) if losses else torch.zeros(0, device=self.device)
        bad = distributed.all_reduce((~torch.isfinite(losses_t)).any().double().reshape(1), self.world_size, op="max")
        distributed.average_gradients(self.stepped, self.world_size)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.stepped, max_norm=self.pipeline.trainer.grad_clip)
        values = torch.cat([bad, grad_norm.detach().double().reshape(1), self._metric_sums(sums, len(losses))])
        values = values.tolist()  # the mini-batch's one wait for the device
        if values[0]:
            bad = (~torch.isfinite(losses_t)).nonzero().flatten().tolist()
            self._raise_bad_loss(_bad_detail(bad[0], losses_t[bad[0]], micro_parts[bad[0]]) if bad else None, where)
        norm = values[1]
        if math.isfinite(norm):
            self.optimizer.step()
            if self.master is not None:
                self.master.copy_to_model()
        else:
            log.warning("step %s: gradient norm is %s; skipping this mini-batch's optimizer step", where[0], norm)
        self.optimizer.zero_grad(set_to_none=True)
        return self._metrics_from(values[2:], norm)

    def _metric_names(self) -> tuple[str, ...]:
        return self.summed + self.averaged

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
        """The DeepSpeed actor's check: ``bad`` is (micro-batch, loss, parts) or None; raises if any rank had one."""
        flag = torch.tensor([0.0 if bad is None else 1.0], device=self.device)
        if float(distributed.all_reduce(flag, self.world_size, op="max").item()) != 0.0:
            self._raise_bad_loss(None if bad is None else _bad_detail(*bad), where)

    def _raise_bad_loss(self, detail: str | None, where: tuple) -> None:
        """Every rank raises (some rank saw a non-finite loss); no optimizer step was taken for the mini-batch."""
        self.optimizer.zero_grad(set_to_none=True)
        step, stage, epoch, index = where
        raise StageError(
            f"step {step}, stage {stage!r}: non-finite actor loss in epoch {epoch}, mini-batch {index} "
            f"{detail or 'on another rank'}; no optimizer step was applied for it. Check the rewards and "
            f"advantages for NaN/inf, or lower trainer.optim.lr"
        )

    def _micro_loss(self, micro: Batch, temperature: float) -> tuple[torch.Tensor, dict[str, Any]]:
        a = self.pipeline.algorithm
        mask = loss_mask(micro).to(self.device).bool()
        topk_ids = micro["teacher_ids"] if self.distill is not None and distill.uses_topk(self.distill) else None
        log_prob, entropy, *student_topk = forward_log_probs(
            self.model,
            micro["prompts"],
            micro["prompt_mask"],
            micro["responses"],
            micro["response_mask"],
            temperature=temperature,
            with_entropy=a.entropy_coeff != 0,
            packed=self.packed,
            topk_ids=topk_ids,
        )
        if self.distill is None or distill.needs_policy_loss(self.distill):
            loss, parts = self._policy_loss(micro, log_prob, entropy, mask)
        else:  # distillation alone: verl computes no policy loss (nor its entropy and KL terms)
            loss, parts = torch.zeros((), device=self.device), {}
        if self.distill is not None:
            loss, parts = self._distillation_loss(micro, log_prob, student_topk, mask, loss, parts)
        parts["actor/loss"] = loss.detach()
        return loss, parts

    def _policy_loss(
        self, micro: Batch, log_prob: torch.Tensor, entropy: torch.Tensor | None, mask: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """verl's ``ppo_loss``: the policy loss, minus the entropy bonus, plus the KL loss."""
        from verl.trainer.ppo import core_algos

        cfg, a = self.loss_config, self.pipeline.algorithm
        weights = micro["rollout_is_weights"].to(self.device) if "rollout_is_weights" in micro else None
        pg_loss, pg_metrics = core_algos.get_policy_loss_fn(cfg.policy_loss.loss_mode)(
            old_log_prob=self._old_log_prob(micro),
            log_prob=log_prob,
            advantages=micro["advantages"].to(self.device),
            response_mask=mask,
            loss_agg_mode=cfg.loss_agg_mode,
            config=cfg,
            rollout_is_weights=weights,
        )
        loss = pg_loss
        self.loss_metric_keys.update(pg_metrics)
        parts = {"actor/pg_loss": pg_loss.detach(), **pg_metrics}
        if entropy is not None:
            entropy_loss = core_algos.agg_loss(entropy, mask, cfg.loss_agg_mode, **cfg.global_batch_info)
            loss = loss - a.entropy_coeff * entropy_loss
            parts["actor/entropy_loss"] = entropy_loss.detach()
        if a.use_kl_loss:
            kld = core_algos.kl_penalty(log_prob, micro["ref_log_prob"].to(self.device), a.kl_loss_type)
            kl_loss = core_algos.agg_loss(kld, mask, cfg.loss_agg_mode, **cfg.global_batch_info)
            loss = loss + kl_loss * a.kl_loss_coef
            parts["actor/kl_loss"] = kl_loss.detach()
        return loss, parts

    def _old_log_prob(self, micro: Batch) -> torch.Tensor:
        return micro["rollout_log_probs" if self.bypass else "old_log_probs"].to(self.device)

    def _distillation_loss(
        self, micro: Batch, log_prob: torch.Tensor, student_topk: list, mask: torch.Tensor, policy_loss, parts: dict
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """verl's ``distillation_ppo_loss``: the distillation term (against the teachers' log-probs) added to the
        policy loss; ``student_topk``: ``[StudentTopK]`` for forward_kl_topk, else empty."""
        cfg = self.distill
        teacher = micro["teacher_logprobs"].to(self.device)
        if student_topk:
            outputs = distill.forward_kl_topk(
                student_topk[0].log_probs, student_topk[0].ids, teacher, micro["teacher_ids"].to(self.device), cfg
            )
            losses, metrics = distill.topk_losses(outputs, mask, cfg.topk)
        else:
            losses, metrics = distill.estimator_losses(log_prob, teacher, mask, cfg.loss_mode)
        weights = micro["rollout_is_weights"].to(self.device) if "rollout_is_weights" in micro else None
        distill_loss, metrics = distill.distillation_loss(
            losses,
            metrics,
            mask,
            loss_config=cfg,
            actor_config=self.loss_config,
            log_prob=log_prob,
            old_log_prob=self._old_log_prob(micro) if cfg.use_policy_gradient else None,
            rollout_is_weights=weights,
        )
        loss = distill.distillation_ppo_loss(policy_loss, distill_loss, cfg)
        return loss, {**parts, **metrics, "distillation/loss": distill_loss.detach()}

    def _reduce_metrics(self, sums: dict[str, Any], micro_count: int, grad_norm: float) -> dict[str, float]:
        """``actor/*`` over ranks from this rank's sums (the DeepSpeed actor's path: one read)."""
        return self._metrics_from(self._metric_sums(sums, micro_count).tolist(), grad_norm)

    def _metric_sums(self, sums: dict[str, Any], micro_count: int) -> torch.Tensor:
        """The metric sums and the micro-batch count, summed over ranks, as one float64 device tensor."""
        values = [torch.as_tensor(sums[k], dtype=torch.float64, device=self.device) for k in self._metric_names()]
        values.append(torch.tensor(float(micro_count), dtype=torch.float64, device=self.device))
        return distributed.all_reduce(torch.stack(values), self.world_size)

    def _metrics_from(self, values: list[float], grad_norm: float) -> dict[str, float]:
        """``actor/*`` from the summed values of ``_metric_sums``."""
        a = self.pipeline.algorithm
        count = max(values[-1], 1.0)
        out = {k: v / self.world_size for k, v in zip(self.summed, values[: len(self.summed)])}
        out.update({k: v / count for k, v in zip(self.averaged, values[len(self.summed) : -1])})
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


def _bad_detail(j: int, loss, parts: dict[str, Any]) -> str:
    return f"in micro-batch {j}: loss={float(loss)}, " + ", ".join(f"{k}={float(v):.6g}" for k, v in parts.items())
