"""The generation benchmark's shared pieces: its prompts, sampling settings and timed calls.

Imported by bench_generation.py (rlflow's venv) and by vllm_generate_run.py (the vLLM venv),
so both measure the same batch the same way. Prompts travel between the two as token ids
in a JSON file, so the vLLM venv needs neither the data loader nor the pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def sampling_params(tokenizer, model, max_new_tokens: int, seed: int):
    """rlflow's SamplingParams for the benchmark: temperature 1, top-p 1, no top-k (the pipeline's sampling)."""
    from rlflow.backends.local.generation import SamplingParams

    eos = {tokenizer.eos_token_id}
    configured = model.generation_config.eos_token_id
    eos.update(configured if isinstance(configured, list) else [configured])
    return SamplingParams(
        max_new_tokens=max_new_tokens,
        eos_token_ids=tuple(sorted(i for i in eos if i is not None)),
        pad_token_id=tokenizer.pad_token_id,
        temperature=1.0,
        top_p=1.0,
        top_k=-1,
        do_sample=True,
        seed=seed,
    )


def prompt_tensors(rows: list[list[int]], pad_id: int):
    """Left-padded ``prompts`` / ``prompt_mask`` from token-id lists (as rlflow's loader pads them)."""
    import torch

    width = max(len(r) for r in rows)
    prompts = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        prompts[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return prompts, mask


def timed(generate: Callable[[Any], tuple], params) -> dict[str, float]:
    """One call: seconds, generated tokens (response-mask sum, EOS included) and tokens per second."""
    start = time.perf_counter()
    _, mask = generate(params)
    seconds = time.perf_counter() - start
    tokens = int(mask.sum())
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "rows": int(mask.shape[0]),
        "decode_steps": int(mask.shape[1]),
    }
