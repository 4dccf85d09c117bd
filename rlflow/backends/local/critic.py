"""The critic: a value model (a one-label token-classification head on a causal LM's body, as verl builds it)
and its update with verl's clipped value loss, mini-batched like the actor's.

Design notes: docs/design/critic.md.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from rlflow.backends.local import distributed
from rlflow.backends.local.actor import build_optimizer, build_scheduler
from rlflow.backends.local.generation import position_ids_from_mask
from rlflow.backends.local.logprob import trim_padding
from rlflow.backends.local.micro_batches import micro_batch_rows, mini_batches
from rlflow.backends.local.models import load_model
from rlflow.batch import Batch, response_span
from rlflow.data.tokenizer import builtin_name, local_dir
from rlflow.errors import BackendError, StageError

SUMMED = ("critic/vf_loss",)  # a partial sum per micro-batch (the loss is normalised over the mini-batch)
AVERAGED = ("critic/vf_clipfrac", "critic/vpred_mean")


def critic_source(pipeline) -> tuple[str, str]:
    """The critic's model path and dtype: ``critic.model``'s, else the policy's."""
    spec = pipeline.critic.model
    return spec.path or pipeline.model.path, spec.dtype or pipeline.model.dtype


def load_value_model(pipeline, tokenizer, *, root: Path | None, device: torch.device):
    """The critic on ``device``: a saved critic (a ``*ForTokenClassification`` directory) as it is, else the
    causal LM at ``critic.model.path`` (default: the policy's) with a fresh one-label head, seeded."""
    from transformers import AutoConfig, AutoModelForTokenClassification

    path, dtype_name = critic_source(pipeline)
    dtype = getattr(torch, dtype_name)
    if builtin_name(path) is None:
        directory = local_dir(path, root, "critic.model.path")
        config = AutoConfig.from_pretrained(str(directory), local_files_only=True)
        if any(a.endswith("ForTokenClassification") for a in config.architectures or ()):
            model = AutoModelForTokenClassification.from_pretrained(str(directory), dtype=dtype, local_files_only=True)
            return model.to(device=device, dtype=dtype)
    spec = pipeline.model.model_copy(update={"path": path, "dtype": dtype_name})
    body = load_model(spec, tokenizer, seed=pipeline.trainer.seed, root=root, device="cpu")
    config = copy_config(body.config)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(pipeline.trainer.seed)
            model = AutoModelForTokenClassification.from_config(config)
    except ValueError as exc:
        raise BackendError(
            f"critic.model.path: {path} ({config.model_type}) has no token-classification form in transformers, "
            f"which a value head needs; give a decoder-only model such as Qwen2 or Llama"
        ) from exc
    model.config.architectures = [type(model).__name__]  # a checkpoint's critic/ then loads as a saved critic
    base = model.base_model_prefix
    model.get_submodule(base).load_state_dict(body.get_submodule(base).state_dict())
    return model.to(device=device, dtype=dtype)


def copy_config(config):
    """The causal LM's config as a one-label critic's, dropout off (verl's settings)."""
    config = type(config).from_dict(config.to_dict())
    config.num_labels = 1
    config.classifier_dropout = 0.0
    config.architectures = None
    return config


def token_values(model, prompts, prompt_mask, responses, response_mask) -> torch.Tensor:
    """Values [B, R] on the model's device: the head's output at the position before each response token,
    zero outside ``response_mask`` (verl's ``[:, -R - 1 : -1]`` slice, masked)."""
    device = next(model.parameters()).device
    width = responses.shape[1]
    prompts, prompt_mask, responses, response_mask = trim_padding(
        prompts.cpu(), prompt_mask.cpu().long(), responses.cpu(), response_mask.cpu().long()
    )
    mask = torch.cat([prompt_mask, response_span(response_mask)], dim=1)
    input_ids = torch.cat([prompts, responses], dim=1)
    on = {"device": device, "non_blocking": True}
    out = model(
        input_ids=input_ids.to(**on), attention_mask=mask.to(**on), position_ids=position_ids_from_mask(mask).to(**on)
    ).logits.squeeze(-1)
    start = prompts.shape[1] - 1
    values = out[:, start : start + responses.shape[1]] * response_mask.to(**on)
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))


class Critic:
    """Owns the value model's optimizer and scheduler; computes values and runs ``update``."""

    def __init__(self, model, pipeline, *, world_size: int = 1, total_training_steps: int | None = None) -> None:
        c = pipeline.critic
        self.model = model
        self.pipeline = pipeline
        self.world_size = world_size
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(self.params, c.optim)
        self.scheduler = build_scheduler(self.optimizer, c.optim, total_training_steps or pipeline.trainer.total_steps)
        self.device = next(model.parameters()).device
        self.collective_device = self.device if world_size > 1 else torch.device("cpu")
        t = pipeline.trainer
        self.mini_batch_size = c.ppo_mini_batch_size or t.ppo_mini_batch_size
        self.micro_batch_size = c.ppo_micro_batch_size_per_gpu or t.ppo_micro_batch_size_per_gpu
        self.epochs = c.ppo_epochs or t.ppo_epochs
        self.loss_agg_mode = c.loss_agg_mode or pipeline.algorithm.loss_agg_mode

    @torch.no_grad()
    def values(self, batch: Batch, micro_batch_size: int | None) -> torch.Tensor:
        """The values of every row of ``batch`` on the CPU, ``micro_batch_size`` rows per forward."""
        self.model.eval()
        out = torch.zeros(len(batch), batch["responses"].shape[1])
        for rows in micro_batch_rows(batch, micro_batch_size=micro_batch_size):
            if rows:
                part = batch.index(rows)
                out[rows] = (
                    token_values(
                        self.model, part["prompts"], part["prompt_mask"], part["responses"], part["response_mask"]
                    )
                    .float()
                    .cpu()
                )
        return out

    def update(self, batch: Batch, *, step: int = 0, stage: str = "update_critic") -> dict[str, float]:
        n = self.pipeline.algorithm.n
        rows = torch.tensor([float(len(batch))], device=self.collective_device)
        total_rows = int(distributed.all_reduce(rows, self.world_size).item())
        minis = mini_batches(batch, total_rows, self.mini_batch_size * n, self.world_size)
        self.model.train()
        history = [
            self._mini_batch(mini, (step, stage, epoch, index))
            for epoch in range(self.epochs)
            for index, mini in enumerate(minis)
        ]
        self.scheduler.step()
        metrics = {k: sum(h[k] for h in history) / len(history) for k in history[0]}
        metrics["critic/lr"] = self.scheduler.get_last_lr()[0]
        return metrics

    @property
    def hf_model(self):
        """The Hugging Face model a checkpoint's ``critic/`` part holds (its weights current)."""
        return self.model

    def _mini_batch(self, mini: Batch, where: tuple) -> dict[str, float]:
        scale = self._scale(mini)
        self.optimizer.zero_grad(set_to_none=True)
        sums = dict.fromkeys(SUMMED + AVERAGED, 0.0)
        count = 0
        for rows in micro_batch_rows(mini, micro_batch_size=self.micro_batch_size):
            if rows:
                loss = self._micro_loss(mini.index(rows), scale, sums, where)
                loss.backward()
                count += 1
        distributed.average_gradients(self.params, self.world_size)
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm=self.pipeline.critic.grad_clip))
        if math.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return self._metrics(sums, count, norm)

    def _scale(self, mini: Batch) -> dict[str, Any]:
        """verl's global-batch normalisation of the loss: the mini-batch's rows and tokens over every rank."""
        counts = torch.tensor(
            [float(len(mini)), float(mini["response_mask"].sum()) if len(mini) else 0.0],
            device=self.collective_device,
        )
        rows, tokens = distributed.all_reduce(counts, self.world_size).tolist()
        return {
            "dp_size": self.world_size,
            "batch_num_tokens": max(tokens, 1.0),
            "global_batch_size": max(rows, float(self.mini_batch_size * self.pipeline.algorithm.n)),
        }

    def _micro_loss(self, micro: Batch, scale: dict[str, Any], sums: dict[str, Any], where: tuple) -> torch.Tensor:
        """verl's clipped value loss of one micro-batch (its metrics added to ``sums``); non-finite: StageError."""
        from verl.trainer.ppo.core_algos import compute_value_loss

        mask = micro["response_mask"].to(self.device).bool()
        vpreds = token_values(
            self.model, micro["prompts"], micro["prompt_mask"], micro["responses"], micro["response_mask"]
        )
        loss, clipfrac = compute_value_loss(
            vpreds=vpreds,
            returns=micro["returns"].to(self.device),
            values=micro["values"].to(self.device),
            response_mask=mask,
            cliprange_value=self.pipeline.critic.cliprange_value,
            loss_agg_mode=self.loss_agg_mode,
            **scale,
        )
        if not torch.isfinite(loss):
            self.optimizer.zero_grad(set_to_none=True)
            step, stage, epoch, index = where
            raise StageError(
                f"step {step}, stage {stage!r}: non-finite critic loss in epoch {epoch}, mini-batch {index}; "
                f"no optimizer step was applied for it. Check the rewards for NaN/inf, or lower critic.optim.lr"
            )
        sums["critic/vf_loss"] += loss.detach()
        sums["critic/vf_clipfrac"] += clipfrac.detach()
        sums["critic/vpred_mean"] += (vpreds * mask).sum().detach() / mask.sum().clamp(min=1)
        return loss

    def _metrics(self, sums: dict[str, Any], count: int, norm: float) -> dict[str, float]:
        """``critic/*`` of a mini-batch over every rank, from this rank's sums over ``count`` micro-batches."""
        values = torch.stack([torch.as_tensor(sums[k], dtype=torch.float64).cpu() for k in (*SUMMED, *AVERAGED)])
        values = torch.cat([values, torch.tensor([float(count)], dtype=torch.float64)]).to(self.collective_device)
        totals = distributed.all_reduce(values, self.world_size).tolist()
        micro_count = max(totals[-1], 1.0)
        out = {k: v / self.world_size for k, v in zip(SUMMED, totals[: len(SUMMED)])}
        out.update({k: v / micro_count for k, v in zip(AVERAGED, totals[len(SUMMED) : -1])})
        out["critic/grad_norm"] = norm
        return out

    # ---- checkpoint state -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
