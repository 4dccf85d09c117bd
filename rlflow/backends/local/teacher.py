"""The teachers of on-policy distillation: frozen causal LMs that score the student's response tokens.

Each teacher of ``distillation.teacher_models`` is loaded like the policy (``models.load_model``) and gives, for
its rows, the log-prob of each sampled token (the estimator modes) or its top-k log-probs and their ids
(forward_kl_topk), at temperature 1.0 as verl's teacher manager does. Design notes: docs/design/distillation.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlflow.backends.local.logprob import forward_log_probs, forward_topk_log_probs
from rlflow.backends.local.models import load_model
from rlflow.batch import Batch
from rlflow.errors import BackendError

TEACHER_TEMPERATURE = 1.0  # verl: teacher_loop/teacher_manager.py scores at temperature 1.0


class Teachers:
    """The pipeline's teachers by name, frozen, on one device."""

    def __init__(self, pipeline, tokenizer, *, root: Path | None = None, device: torch.device | str = "cpu") -> None:
        self.models = {
            name: _load_teacher(name, spec, pipeline, tokenizer, root, device)
            for name, spec in pipeline.distillation.teacher_models.items()
        }

    @torch.no_grad()
    def log_probs(self, batch: Batch, params: dict[str, Any]) -> dict[str, torch.Tensor]:
        """``teacher_logprobs`` [B, R, K] (and ``teacher_ids`` for top-k) of every row, by its teacher.

        ``params``: ``teachers`` (a teacher name per row), ``topk`` (0: the sampled token's log-prob, K=1),
        ``micro_batch_size`` (rows per forward; None: a teacher's rows at once).
        """
        names, k = list(params["teachers"]), int(params.get("topk") or 0)
        rows, width = len(batch), batch["responses"].shape[1]
        out = {"teacher_logprobs": torch.zeros((rows, width, max(k, 1)))}
        if k:
            out["teacher_ids"] = torch.zeros((rows, width, k), dtype=torch.long)
        for name in dict.fromkeys(names):
            if name not in self.models:
                raise BackendError(f"compute_teacher_log_probs: no teacher {name!r}; loaded: {sorted(self.models)}")
            mine = [i for i, n in enumerate(names) if n == name]
            size = params.get("micro_batch_size") or len(mine)
            for start in range(0, len(mine), size):
                part = mine[start : start + size]
                for key, value in self._forward(self.models[name], batch.index(part), k).items():
                    out[key][part] = value.cpu()
        return out

    @staticmethod
    def _forward(model, part: Batch, k: int) -> dict[str, torch.Tensor]:
        fields = (part["prompts"], part["prompt_mask"], part["responses"], part["response_mask"])
        if k:
            values, ids = forward_topk_log_probs(model, *fields, k, temperature=TEACHER_TEMPERATURE)
            return {"teacher_logprobs": values.float(), "teacher_ids": ids}
        log_probs, _ = forward_log_probs(model, *fields, temperature=TEACHER_TEMPERATURE)
        scored = part["response_mask"].to(log_probs.device).bool()
        return {"teacher_logprobs": log_probs.float().masked_fill(~scored, 0.0)[..., None]}


def _load_teacher(name: str, spec, pipeline, tokenizer, root: Path | None, device):
    """One teacher (``model.path`` rules: builtin:<name> or a local HF directory), frozen in eval mode."""
    model_spec = pipeline.model.model_copy(
        update={"path": spec.model_path, "dtype": spec.dtype or pipeline.model.dtype, "gradient_checkpointing": False}
    )
    model = load_model(model_spec, tokenizer, seed=pipeline.trainer.seed, root=root, device=device)
    check_vocabulary(name, spec.model_path, model, student_vocab_size(pipeline, tokenizer, root))
    return model.eval().requires_grad_(False)


def student_vocab_size(pipeline, tokenizer, root: Path | None) -> int:
    """The rows of the student's logits: the built-in model's rounded tokenizer length, else its config's."""
    from transformers import AutoConfig

    from rlflow.data.tokenizer import builtin_name, local_dir

    if builtin_name(pipeline.model.path) is not None:
        return -(-len(tokenizer) // 64) * 64  # as models._build_builtin rounds it
    directory = local_dir(pipeline.model.path, root, "model.path")
    return AutoConfig.from_pretrained(str(directory), local_files_only=True).vocab_size


def check_vocabulary(name: str, path: str, teacher, student_vocab: int) -> None:
    """verl needs one vocabulary for teacher and student: the teacher's ids index the student's logits."""
    rows = teacher.get_output_embeddings().weight.shape[0]
    if rows != student_vocab:
        raise BackendError(
            f"distillation.teacher_models.{name}: {path} predicts {rows} tokens but the student "
            f"predicts {student_vocab}; distillation needs a shared vocabulary: give a teacher with the student's tokenizer"
        )
