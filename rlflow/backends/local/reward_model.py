"""The ``reward_model`` role on a local worker: a sequence classifier scoring (prompt, response) rows (verl's disrm).

``reward_model.model_path`` (a local Hugging Face directory or ``builtin:<name>``) is loaded with its own
tokenizer, without gradient; a row's score is the classifier's output (num_labels=1) at its last token,
as verl's reward-model workers read it. Design notes: docs/design/reward_models.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlflow.data.tokenizer import load_tokenizer, local_dir
from rlflow.errors import BackendError

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.schemas.pipeline import Pipeline

WHAT = "reward_model.model_path"


def encode(tokenizer, prompts: list[str], responses: list[str], max_length: int | None) -> list[list[int]]:
    """Each row's ids: ``prompt + response`` by the model's tokenizer (the prompt is already chat-templated, so
    no special tokens are added); a row over ``max_length`` keeps its tail, where the answer is."""
    texts = [p + r for p, r in zip(prompts, responses, strict=True)]
    rows = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    return [list(row[-max_length:]) if max_length else list(row) for row in rows]


def pad_right(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` and ``attention_mask``, right-padded: positions count from 0 in every row, as unpadded."""
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids, mask


def last_token_scores(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The classifier's output at each row's last real token, [B] float32.

    A decoder classifier (``score`` head: Qwen2, Llama, Mistral...) runs its body and the head on that token
    only, found by the attention mask, so a pad id inside the text cannot move it; any other classifier
    pools as its own forward does."""
    head = getattr(model, "score", None)
    if isinstance(head, torch.nn.Linear):
        hidden = model.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
        last = (mask.sum(-1) - 1).clamp(min=0)
        picked = hidden[torch.arange(len(ids), device=ids.device), last]
        return head(picked)[:, 0].float()
    return model(input_ids=ids, attention_mask=mask).logits[:, 0].float()


def load_classifier(path: str, root: Path | None, dtype: torch.dtype, device):
    """The sequence classifier in ``path``: one label, eval mode, no gradient; a BackendError naming
    ``reward_model.model_path`` when it is missing or is not one."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    directory = local_dir(path, root, WHAT)
    try:
        config = AutoConfig.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise BackendError(
            f"{WHAT}: {directory} is not a Hugging Face model directory (no usable config.json): {exc}"
        ) from exc
    architectures = getattr(config, "architectures", None) or []
    if not any(a.endswith("ForSequenceClassification") for a in architectures) or config.num_labels != 1:
        raise BackendError(
            f"{WHAT}: {directory} holds {', '.join(architectures) or type(config).__name__} with "
            f"{config.num_labels} label(s); rm_score needs a sequence classifier with num_labels=1 "
            f"(e.g. Qwen2ForSequenceClassification); a generative judge is judge_score's"
        )
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            str(directory), config=config, dtype=dtype, local_files_only=True
        )
    except (OSError, ValueError) as exc:
        raise BackendError(f"{WHAT}: could not load the classifier in {directory}: {exc}") from exc
    return model.to(device=device).eval().requires_grad_(False), directory


class RewardModel:
    """The reward model of ``pipeline.reward_model`` on ``device``: ``score(prompts, responses, params)``."""

    def __init__(self, pipeline: Pipeline, *, root: Path | None = None, device: Any = "cpu") -> None:
        from rlflow.schemas.pipeline import ModelSpec

        spec = pipeline.reward_model
        if not spec.model_path:
            raise BackendError(f"{WHAT} is not set; the rm_score stage needs a sequence classifier to score with")
        dtype = getattr(torch, spec.dtype or pipeline.model.dtype)
        self.model, directory = load_classifier(spec.model_path, root, dtype, device)
        self.tokenizer = load_tokenizer(ModelSpec(path=str(directory)), root)
        self.device = torch.device(device)

    @torch.no_grad()
    def score(self, prompts: list[str], responses: list[str], params: dict[str, Any]) -> torch.Tensor:
        """Each row's score, [B] float32 on the CPU; ``params``: ``micro_batch_size`` (None: all rows in one
        forward) and ``max_length`` (None: no cut; else a longer row keeps its last tokens)."""
        rows = encode(self.tokenizer, list(prompts), list(responses), params.get("max_length"))
        step = params.get("micro_batch_size") or max(len(rows), 1)
        out = [torch.zeros(0)]
        for start in range(0, len(rows), step):
            ids, mask = pad_right(rows[start : start + step], self.tokenizer.pad_token_id)
            out.append(last_token_scores(self.model, ids.to(self.device), mask.to(self.device)).cpu())
        return torch.cat(out).float()
