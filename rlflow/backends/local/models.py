"""Model loading for the local backend, and the built-in tiny model (tokenizers: ``rlflow.data.tokenizer``).

``model.path`` is either ``builtin:<name>`` or a local Hugging Face directory; never a hub download.
Design notes: docs/design/local_engine.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlflow.batch import Batch
from rlflow.data.tokenizer import builtin_name, local_dir
from rlflow.errors import BackendError

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.schemas.pipeline import ModelSpec

# Shapes of the built-in models (Qwen2Config keyword arguments); vocab comes from the tokenizer.
BUILTIN_MODELS: dict[str, dict[str, Any]] = {
    "tiny-qwen2": dict(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
    ),
}


def load_model(model_spec: ModelSpec, tokenizer, *, seed: int, root: Path | None = None, device: str = "cpu"):
    """The causal LM of ``model_spec`` on ``device`` in ``model_spec.dtype``."""
    import torch

    dtype = getattr(torch, model_spec.dtype)
    name = builtin_name(model_spec.path)
    model = _build_builtin(name, tokenizer, seed) if name is not None else _load_dir(model_spec.path, root, dtype)
    model.to(device=device, dtype=dtype)
    if model_spec.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def _build_builtin(name: str, tokenizer, seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = -(-len(tokenizer) // 64) * 64  # round up: friendlier matmul shapes
    config = Qwen2Config(
        vocab_size=vocab,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **BUILTIN_MODELS[name],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(config)


def _load_dir(path: str, root: Path | None, dtype):
    from transformers import AutoConfig, AutoModelForCausalLM

    directory = local_dir(path, root, "model.path")
    try:
        config = AutoConfig.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise BackendError(
            f"model.path: {directory} is not a Hugging Face model directory (no usable config.json): {exc}"
        ) from exc
    try:
        return AutoModelForCausalLM.from_pretrained(
            str(directory), config=config, dtype=dtype, attn_implementation="sdpa", local_files_only=True
        )
    except ValueError as exc:
        raise BackendError(
            f"model.path: {directory} holds a {type(config).__name__} ({config.model_type}), which is not a causal "
            f"language model; give a decoder-only model (e.g. Qwen2, Llama) directory"
        ) from exc
    except OSError as exc:
        raise BackendError(f"model.path: could not load the weights in {directory}: {exc}") from exc


def build_prompt_batch(tokenizer, texts: list[str], max_prompt_length: int) -> Batch:
    """``prompts`` / ``prompt_mask`` for ``texts``: left-padded with the pad id to the longest prompt.

    A prompt longer than ``max_prompt_length`` tokens is an error naming it (the data loader
    owns the drop/left/error policy; this helper is for tests and tools).
    """
    import torch

    ids = tokenizer(list(texts), add_special_tokens=True)["input_ids"]
    too_long = [i for i, row in enumerate(ids) if len(row) > max_prompt_length]
    if too_long:
        i = too_long[0]
        raise BackendError(
            f"prompt {i} is {len(ids[i])} tokens, over data.max_prompt_length={max_prompt_length} "
            f"({len(too_long)} prompt(s) too long); raise max_prompt_length or shorten the prompts"
        )
    width = max((len(row) for row in ids), default=0)
    prompts = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, row in enumerate(ids):
        if row:
            prompts[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return Batch({"prompts": prompts, "prompt_mask": mask})
