"""DeepSpeed training engine for the critic, when the actor trains with DeepSpeed (``update_actor.with.engine``).

``DeepSpeedCritic`` is the torch ``Critic`` with DeepSpeed doing backward, reduction, clipping and the step at
the actor's ZeRO stage; its loss, scaling and metrics are inherited. Design notes: docs/design/critic.md.
"""

from __future__ import annotations

import copy
import math

import torch

from rlflow.backends.local.critic import AVERAGED, SUMMED, Critic, critic_source, token_values
from rlflow.backends.local.deepspeed_actor import (
    DeepSpeedCheckpoint,
    agreed_even_rows,
    ds_config,
    init_deepspeed_distributed,
)
from rlflow.batch import Batch


class DeepSpeedCritic(DeepSpeedCheckpoint, Critic):
    """The critic's update through a DeepSpeed engine; ``plain`` is the Hugging Face model checkpoints hold."""

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
        init_deepspeed_distributed(rank, world_size, device, dist)  # a no-op when the actor's engine did it
        self.plain = model
        module = copy.deepcopy(model)
        super().__init__(module, pipeline, world_size=world_size, total_training_steps=total_training_steps)
        import deepspeed

        self.zero_stage = zero_stage
        config = ds_config(
            pipeline,
            world_size=world_size,
            zero_stage=zero_stage,
            num_params=sum(p.numel() for p in module.parameters()),
            mini_batch_size=self.mini_batch_size,
            micro_batch_size=self.micro_batch_size,
            grad_clip=pipeline.critic.grad_clip,
            dtype=critic_source(pipeline)[1],
        )
        self.engine, _, _, _ = deepspeed.initialize(
            model=module, optimizer=self.optimizer, config=config, dist_init_required=False
        )
        self.module = module
        self.model = self.engine  # forwards go through DeepSpeed (ZeRO-3 gathers in its hooks)

    @property
    def hf_model(self):
        """``plain`` with the trained weights (under ZeRO-3 a gather every rank joins)."""
        if self.zero_stage < 3:
            self.plain.load_state_dict(self.module.state_dict())
        else:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(self.module.parameters()), modifier_rank=None):
                self.plain.load_state_dict(self.module.state_dict())
        return self.plain

    @torch.no_grad()
    def values(self, batch: Batch, micro_batch_size: int | None) -> torch.Tensor:
        """The values through DeepSpeed's module, the same number of forwards on every rank."""
        self.engine.eval()
        out = torch.zeros(len(batch), batch["responses"].shape[1])
        for rows in agreed_even_rows(len(batch), micro_batch_size, self.world_size, self.device):
            if not rows:
                self._zero_loss()
                continue
            part = batch.index(rows)
            out[rows] = token_values(
                self.engine, part["prompts"], part["prompt_mask"], part["responses"], part["response_mask"]
            ).float().cpu()  # fmt: skip
        return out

    def _mini_batch(self, mini: Batch, where: tuple) -> dict[str, float]:
        scale = self._scale(mini)
        sums = dict.fromkeys(SUMMED + AVERAGED, 0.0)
        parts = agreed_even_rows(len(mini), self.micro_batch_size, self.world_size, self.device)
        count = 0
        for j, rows in enumerate(parts):
            self.engine.set_gradient_accumulation_boundary(j == len(parts) - 1)
            if rows:
                loss = self._micro_loss(mini.index(rows), scale, sums, where)
                count += 1
            else:
                loss = self._zero_loss()
            self.engine.backward(loss, scale_wrt_gas=False)
        unsharded = self._unsharded_norm()
        self.engine.step()
        norm = self.engine.get_global_grad_norm() if unsharded is None else unsharded
        return self._metrics(sums, count, float(norm) if norm is not None else math.nan)

    def _unsharded_norm(self) -> float | None:
        """Without ZeRO, DeepSpeed reports no norm: the gradients' own, before its clipping (``critic/grad_norm``)."""
        if self.zero_stage > 0:
            return None
        grads = [p.grad for p in self.params if p.grad is not None]
        return (
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0
        )

    def _zero_loss(self) -> torch.Tensor:
        """A loss with zero gradient that still runs the forward (and DeepSpeed's hooks) once."""
        one = torch.zeros((1, 1), dtype=torch.long)
        return (token_values(self.engine, one, torch.ones_like(one), one, torch.ones_like(one)) * 0.0).sum()
