"""``ConfiguredLocalEngine``: the local engine with the pipeline's DeepSpeed trainer and/or vLLM rollout.

``LocalEngine`` does everything with torch; this subclass swaps in the engines a pipeline asks for and leaves
every other path to its parent. Design notes: docs/design/local_engine.md.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import torch

from rlflow.backends.local.engine_choice import EngineChoice
from rlflow.backends.local.local_engine import ALL_ROLES, LocalEngine
from rlflow.batch import Batch
from rlflow.data.tokenizer import BUILTIN_PREFIX, resolve_path
from rlflow.schemas.model_roles import MODEL_ROLES


class ConfiguredLocalEngine(LocalEngine):
    """A ``LocalEngine`` whose trainer and rollout follow the pipeline's engine choices."""

    def __init__(
        self,
        pipeline,
        *,
        choice: EngineChoice,
        device: str = "cpu",
        rank: int = 0,
        world_size: int = 1,
        roles: frozenset = ALL_ROLES,
        project_root=None,
        dist: dict | None = None,
        total_training_steps: int | None = None,
        run_dir=None,
    ) -> None:
        super().__init__(
            pipeline,
            device=device,
            rank=rank,
            world_size=world_size,
            roles=roles,
            project_root=project_root,
            dist=dist,
            total_training_steps=total_training_steps,
            run_dir=run_dir,
        )
        self.choice = choice
        self.deepspeed = None
        if choice.training == "deepspeed":  # the actor, and the critic beside it, train with DeepSpeed
            ds = {"rank": rank, "world_size": world_size, "device": self.device, "dist": dist,
                  "zero_stage": choice.zero_stage, "total_training_steps": total_training_steps}  # fmt: skip
            if self.actor is not None:
                from rlflow.backends.local.deepspeed_actor import DeepSpeedActor

                self.actor = self.deepspeed = DeepSpeedActor(copy.deepcopy(self.model), pipeline, **ds)
            if self.critic is not None:
                from rlflow.backends.local.deepspeed_critic import DeepSpeedCritic

                self.critic = DeepSpeedCritic(self.critic.model, pipeline, **ds)
        self.vllm = None
        if "rollout" in self.roles and choice.rollout == "vllm":
            self.vllm = self._start_vllm(project_root)

    def _start_vllm(self, project_root):
        from rlflow.backends.local.vllm_rollout import VllmRollout

        spec, data = self.pipeline.model, self.pipeline.data
        options = {
            "dtype": spec.dtype,
            "seed": self.pipeline.trainer.seed,
            "max_model_len": data.max_prompt_length + data.max_response_length,
            "device": "cpu" if self.device.type == "cpu" else "cuda",
        }
        if spec.path.startswith(BUILTIN_PREFIX) or spec.tokenizer is not None:
            return VllmRollout.from_model(self.model, self.tokenizer, **options)
        return VllmRollout(resolve_path(spec.path, project_root), **options)

    # ---- rollout ----------------------------------------------------------------------------
    def _check_generation_engine(self, engine: str) -> None:
        if engine != "vllm" or self.vllm is None:
            super()._check_generation_engine(engine)

    def _sample(self, model, engine, batch, sp, params):
        """``engine: vllm`` decodes with vLLM; the others with the torch model (validation may use either)."""
        if engine != "vllm":
            return super()._sample(model, engine, batch, sp, params)
        return (*self.vllm.generate(batch["prompts"], batch["prompt_mask"], sp), None)

    # ---- log-probs --------------------------------------------------------------------------
    def compute_log_prob(self, batch: Batch, params: dict[str, Any]) -> Batch:
        if self.deepspeed is None:
            return super().compute_log_prob(batch, params)
        self._need("actor", "compute_log_prob")
        log_probs, entropys = self.deepspeed.log_probs(
            batch,
            micro_batch_size=params.get("micro_batch_size"),
            max_token_len=params.get("max_token_len"),
            temperature=float(params.get("temperature", 1.0)),
            with_entropy=True,
        )
        return Batch({"old_log_probs": log_probs, "entropys": entropys})

    # ---- weights ----------------------------------------------------------------------------
    def update_weights(self, global_steps: int) -> dict[str, float]:
        metrics = super().update_weights(global_steps)
        start = time.perf_counter()
        moved = self._refresh_dense()
        if self.vllm is not None:
            moved += self.vllm.load_weights(self._model_weights())["sync/bytes"]
        if moved:
            metrics = {
                "sync/bytes": float(moved),
                "sync/seconds": metrics["sync/seconds"] + time.perf_counter() - start,
            }
        return metrics

    def load_rollout_weights(self, state: dict[str, torch.Tensor], global_steps: int) -> dict[str, float]:
        metrics = super().load_rollout_weights(state, global_steps)
        if self.vllm is None:
            return metrics
        pushed = self.vllm.load_weights(self._model_weights())  # the model now holds ``state`` (ties restored)
        return {"sync/bytes": pushed["sync/bytes"], "sync/seconds": metrics["sync/seconds"] + pushed["sync/seconds"]}

    def _refresh_dense(self) -> float:
        """Copy DeepSpeed's trained weights into the engine's module (ZeRO-3: a gather); returns bytes copied."""
        if self.deepspeed is None:
            return 0.0
        state = self.deepspeed.dense_state_dict()
        self.model.load_state_dict(state)
        return float(sum({t.data_ptr(): t.numel() * t.element_size() for t in state.values()}.values()))

    def _model_weights(self) -> list[tuple[str, torch.Tensor]]:
        """The rollout model's tensors by HF name, tied ones under each name.

        vLLM's in-place reload wants every module's weights, a tied LM head included (without
        it the head is left unloaded); ``VllmRollout.load_weights`` counts shared storage once.
        """
        return [(key, tensor.detach()) for key, tensor in self.model.state_dict().items()]

    # ---- checkpoints ------------------------------------------------------------------------
    def save_checkpoint(self, path: str, global_steps: int) -> dict[str, Any]:
        self._refresh_dense()
        out = super().save_checkpoint(path, global_steps)
        if self.deepspeed is not None:
            out["deepspeed"] = str(self.deepspeed.save_checkpoint(path, global_steps))
        if self._deepspeed_critic():
            self.critic.save_checkpoint(Path(path) / MODEL_ROLES["critic"].checkpoint_part, global_steps)
        return out

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        out = super().load_checkpoint(path)
        if self.deepspeed is not None:
            self.deepspeed.load_checkpoint(path)
            self._refresh_dense()
        if self._deepspeed_critic():
            self.critic.load_checkpoint(Path(path) / MODEL_ROLES["critic"].checkpoint_part)
        if self.vllm is not None:
            self.vllm.load_weights(self._model_weights())
        return out

    def _deepspeed_critic(self) -> bool:
        return self.critic is not None and self.choice.training == "deepspeed"

    def close(self) -> None:
        if self.vllm is not None:
            self.vllm.close()
            self.vllm = None
        super().close()
