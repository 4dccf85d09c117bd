"""vLLM rollout engine for ``generate`` (``with: {engine: vllm}``).

``VllmRollout`` wraps one in-process ``vllm.LLM`` inside a pool worker and speaks the local engine's rollout
contract. vllm is imported only inside ``VllmRollout``, and verl never. Design notes: docs/design/generation.md.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import torch

from rlflow.backends.local.generation import SamplingParams, response_mask_from_tokens
from rlflow.errors import BackendError

DEFAULT_GPU_MEMORY_UTILIZATION = 0.5
CPU_TOKEN_BUDGET = 65536  # tokens per scheduler step on the CPU; see "never prefilled in chunks"
CPU_MAX_SEQS = 256


def save_model_dir(model, tokenizer, directory: str | Path | None = None) -> Path:
    """Write ``model`` and ``tokenizer`` as a Hugging Face directory vLLM can load; returns it."""
    out = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="rlflow-vllm-"))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def sleep_mode_available() -> bool:
    """Whether this vLLM platform can sleep (release device memory) between generations."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


class VllmRollout:
    """One vLLM engine serving a worker's ``generate`` calls."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        dtype: str = "float32",
        seed: int = 0,
        max_model_len: int = 2048,
        device: str = "cpu",
        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
        sleep_mode: bool | None = None,
        owned_dir: bool = False,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if device == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from vllm import LLM

        self.model_dir = Path(model_dir)
        self._owned_dir = owned_dir
        self.sleep_mode = sleep_mode_available() if sleep_mode is None else sleep_mode
        if device == "cpu":
            self.token_budget = max(CPU_TOKEN_BUDGET, max_model_len)
            kwargs = {"max_num_batched_tokens": self.token_budget, "max_num_seqs": CPU_MAX_SEQS}
        else:
            self.token_budget = None
            kwargs = {"gpu_memory_utilization": gpu_memory_utilization}
        try:
            self.llm = LLM(
                model=str(self.model_dir),
                tokenizer=str(self.model_dir),
                dtype=dtype,
                seed=seed,
                max_model_len=max_model_len,
                enforce_eager=device == "cpu",
                enable_sleep_mode=self.sleep_mode,
                distributed_executor_backend="uni",
                enable_prefix_caching=False,
                **kwargs,
            )
        except (OSError, ValueError, RuntimeError) as exc:
            raise BackendError(f"generate: vLLM could not start on {self.model_dir}: {exc}") from exc
        self._state = "awake"
        self.max_model_len = max_model_len
        self.sleep()

    @classmethod
    def from_model(cls, model, tokenizer, **kwargs) -> VllmRollout:
        """Save an in-memory model to a temporary directory (removed on ``close``) and serve it."""
        directory = save_model_dir(model, tokenizer)
        try:
            return cls(directory, owned_dir=True, **kwargs)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise

    # ---- memory -----------------------------------------------------------------------------
    # States: "awake" (weights and KV cache resident), "weights" (weights only), "asleep".
    def sleep(self) -> None:
        """Free device memory for training (level 1: weights kept on the host); no-op without sleep mode."""
        if self.sleep_mode and self._state != "asleep":
            self.llm.sleep(level=1)
            self._state = "asleep"

    def _wake_weights(self) -> None:
        if self.sleep_mode and self._state == "asleep":
            self.llm.wake_up(["weights"])
            self._state = "weights"

    def _wake_all(self) -> None:
        self._wake_weights()
        if self.sleep_mode and self._state == "weights":
            self.llm.wake_up(["kv_cache"])
            self._state = "awake"

    # ---- generation -------------------------------------------------------------------------
    def generate(
        self, prompts: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``responses`` [B, R] right-padded with pad and ``response_mask`` [B, R], on the CPU."""
        from vllm.inputs import TokensPrompt

        rows = prompts.tolist()
        keep = prompt_mask.bool().tolist()
        inputs = [TokensPrompt(prompt_token_ids=[t for t, k in zip(r, m) if k]) for r, m in zip(rows, keep)]
        too_long = [
            i for i, p in enumerate(inputs) if len(p["prompt_token_ids"]) + params.max_new_tokens > self.max_model_len
        ]
        if too_long:
            raise BackendError(
                f"generate: prompt {too_long[0]} plus max_response_length={params.max_new_tokens} exceeds "
                f"vLLM's max_model_len={self.max_model_len}; shorten prompts or raise data.max_prompt_length"
            )
        sampling = [self._sampling(params, i) for i in range(len(inputs))]
        self._wake_all()
        try:
            outputs = []
            for start, end in self._groups(inputs):
                outputs += self.llm.generate(inputs[start:end], sampling[start:end], use_tqdm=False)
        finally:
            self.sleep()
        out = torch.full((len(inputs), params.max_new_tokens), params.pad_token_id, dtype=torch.long)
        for i, result in enumerate(outputs):
            tokens = list(result.outputs[0].token_ids)[: params.max_new_tokens]
            if tokens:
                out[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        mask = response_mask_from_tokens(out, params.eos_token_ids)
        return out.masked_fill(mask == 0, params.pad_token_id), mask

    def _groups(self, inputs: list) -> list[tuple[int, int]]:
        """Consecutive (start, end) groups of rows to generate together: all rows at once, except on
        the CPU, where each group's prompts fit one scheduler step's token budget (and its row cap)."""
        if self.token_budget is None:
            return [(0, len(inputs))]
        groups, start, used = [], 0, 0
        for i, item in enumerate(inputs):
            size = len(item["prompt_token_ids"]) + 1
            if i > start and (used + size > self.token_budget or i - start >= CPU_MAX_SEQS):
                groups.append((start, i))
                start, used = i, 0
            used += size
        if inputs:
            groups.append((start, len(inputs)))
        return groups

    @staticmethod
    def _sampling(params: SamplingParams, row: int):
        from vllm import SamplingParams as VllmSamplingParams

        common = {
            "max_tokens": params.max_new_tokens,
            "stop_token_ids": list(params.eos_token_ids),
            "ignore_eos": False,
            "detokenize": False,
            "n": 1,
        }
        if params.greedy:
            return VllmSamplingParams(temperature=0.0, **common)
        return VllmSamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            seed=(params.seed + row) % (2**63),
            **common,
        )

    # ---- weights ----------------------------------------------------------------------------
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> dict[str, float]:
        """Replace the served weights in place; returns ``sync/bytes`` and ``sync/seconds``."""
        start = time.perf_counter()
        weights = list(weights)
        self._wake_weights()  # the KV cache stays freed until the next generation wakes it
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        distinct = {t.data_ptr(): t.numel() * t.element_size() for _, t in weights}
        size = sum(distinct.values())  # a tied weight is the same tensor under two names: counted once
        return {"sync/bytes": float(size), "sync/seconds": time.perf_counter() - start}

    def close(self) -> None:
        self.llm = None  # the last reference: vLLM frees its in-process engine core and KV cache with it
        if self._owned_dir:
            shutil.rmtree(self.model_dir, ignore_errors=True)
