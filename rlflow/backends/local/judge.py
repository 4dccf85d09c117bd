"""``Judge``: a frozen causal LM beside the policy that writes a verdict on each judging prompt (verl's genrm).

The ``reward_model:`` block's model with its own tokenizer and chat template; it decodes with the local
rollout's sampler (``rlflow.backends.local.generation``) under ``reward_model.rollout``. It never trains and
never receives the policy's weights. Design notes: docs/design/reward_models.md.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from rlflow.backends.local import generation
from rlflow.backends.local.models import load_model
from rlflow.data.tokenizer import load_tokenizer
from rlflow.errors import BackendError
from rlflow.schemas.pipeline import ModelSpec


class Judge:
    """``verdicts(messages_per_row, params)``: one decoded verdict per row of chat messages."""

    def __init__(self, pipeline, *, root: Path | None = None, device: torch.device | str = "cpu") -> None:
        spec = pipeline.reward_model
        if not spec.model_path:
            raise BackendError("reward_model.model_path: a judge_score stage needs the judge's model; set it")
        self.spec = spec
        # its own ModelSpec: the judge's tokenizer and dtype, never the policy's
        model_spec = ModelSpec(path=spec.model_path, dtype=spec.dtype or pipeline.model.dtype)
        self.tokenizer = load_tokenizer(model_spec, root)
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(
                f"reward_model.model_path: the tokenizer of {spec.model_path!r} has no chat template; a judge is "
                "prompted as a chat (give a directory whose tokenizer_config.json or chat_template.jinja has one)"
            )
        model = load_model(model_spec, self.tokenizer, seed=pipeline.trainer.seed, root=root, device=device)
        self.model = model.eval().requires_grad_(False)
        self.eos_token_ids = self._eos_ids()

    def _eos_ids(self) -> tuple[int, ...]:
        extra = self.model.generation_config.eos_token_id
        ids = {self.tokenizer.eos_token_id, *(extra if isinstance(extra, list) else [extra])}
        return tuple(sorted(i for i in ids if i is not None))

    def prompt_ids(self, messages_per_row: list[list[dict]], prompt_length: int) -> list[list[int]]:
        """Each row's chat (with the generation prompt) as token ids, cut to its last ``prompt_length``."""
        texts = [
            self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
            for messages in messages_per_row
        ]
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        # the left cut keeps the end: the question to answer and the generation prompt
        return [list(row[-prompt_length:]) for row in ids]

    def sampling(self, params: dict[str, Any]) -> generation.SamplingParams:
        fields = type(self.spec.rollout).model_fields
        rollout = self.spec.rollout.model_copy(update={k: v for k, v in params.items() if k in fields})
        return generation.SamplingParams(
            max_new_tokens=rollout.response_length,
            eos_token_ids=self.eos_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            temperature=rollout.temperature,
            top_p=rollout.top_p,
            top_k=rollout.top_k,
            do_sample=rollout.temperature > 0,
            seed=int(params.get("seed", 0)),
        )

    def verdicts(self, messages_per_row: list[list[dict]], params: dict[str, Any]) -> list[str]:
        """The decoded verdicts (special tokens dropped), micro-batched by ``params["micro_batch_size"]``."""
        prompt_length = int(params.get("prompt_length", self.spec.rollout.prompt_length))
        ids = self.prompt_ids(messages_per_row, prompt_length)
        sp = self.sampling(params)
        size = int(params.get("micro_batch_size") or self.spec.micro_batch_size_per_gpu or len(ids) or 1)
        out: list[str] = []
        for chunk, start in enumerate(range(0, len(ids), size)):
            # each chunk its own seed: a sampled verdict does not depend on how the rows were cut
            chunk_sp = sp if sp.greedy else replace(sp, seed=generation.chunk_seed(sp.seed, chunk))
            out.extend(self._decode_chunk(ids[start : start + size], chunk_sp))
        return out

    def _decode_chunk(self, rows: list[list[int]], sp: generation.SamplingParams) -> list[str]:
        prompts, mask = left_padded(rows, self.tokenizer.pad_token_id)
        responses, response_mask = generation.sample(self.model, prompts, mask, sp)
        responses, response_mask = responses.cpu(), response_mask.cpu()
        return [
            self.tokenizer.decode(row[: int(m.sum())].tolist(), skip_special_tokens=True)
            for row, m in zip(responses, response_mask, strict=True)
        ]


def left_padded(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``prompts`` and ``prompt_mask`` [B, P] of token-id rows, left-padded with ``pad_id``."""
    width = max((len(r) for r in rows), default=0)
    prompts = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            prompts[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return prompts, mask
