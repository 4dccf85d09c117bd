"""Batched sampling for the local rollout: a KV-cached decode loop, and HF ``generate`` as an alternative.

One batched forward per response position, one prefill per prompt group, finished rows dropped, at most
``max_num_seqs`` rows at once; each sampled token keeps its log-prob. Design notes: docs/design/generation.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

SYNC_EVERY = 8
CPU_MAX_NUM_SEQS = 64  # rows a CPU decodes at once unless max_num_seqs says otherwise (see decode_rows_limit)


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0


def response_mask_from_tokens(responses: torch.Tensor, eos_token_ids: tuple[int, ...]) -> torch.Tensor:
    """1 up to and including the first EOS of each row, 0 after it (all ones without an EOS)."""
    is_eos = torch.isin(responses, torch.tensor(eos_token_ids, device=responses.device)).long()
    eos_before = is_eos.cumsum(-1) - is_eos
    return (eos_before == 0).long()


def processed_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The float logits a row is drawn from: divided by the temperature, top-k and top-p cut to -inf.

    Greedy decoding draws nothing: its logits stay raw (vLLM reports greedy log-probs the same way).
    """
    logits = logits.float()
    if params.greedy:
        return logits
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum <= 1 - params.top_p
        drop[:, -1] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def draw(processed: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row from ``processed_logits``: the best one when greedy, else an exact random draw."""
    if params.greedy:
        return processed.argmax(-1)
    probs = processed.softmax(-1)
    race = torch.empty_like(probs).exponential_(1.0, generator=generator)
    return (probs / race).argmax(-1)


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids of left-padded rows: ``cumsum - 1`` of the attention mask, as HF ``generate`` does."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def shared_prompt_starts(prompts: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """Rows that start a run of identical prompts (GRPO's n samples sit side by side); None if no run."""
    if prompts.shape[0] < 2:
        return None
    same = (prompts[1:] == prompts[:-1]).all(-1) & (mask[1:] == mask[:-1]).all(-1)
    if not bool(same.any()):
        return None
    return torch.cat([torch.ones(1, dtype=torch.bool, device=prompts.device), ~same])


def _prefill(model, prompts: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache) -> torch.Tensor:
    """Last-position logits of every row; a prompt repeated on neighbouring rows is encoded once.

    The cache is then fanned out to every row (``reorder_cache`` = ``index_select``), so the n
    samples of a prompt share one prefill, which dominates the cost when prompts are long.
    """
    starts = shared_prompt_starts(prompts, mask)
    if starts is None:
        return model(
            input_ids=prompts,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
    first = starts.nonzero().squeeze(-1)
    logits = model(
        input_ids=prompts[first],
        attention_mask=mask[first],
        position_ids=positions[first],
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    ).logits[:, -1]
    row_to_group = starts.long().cumsum(0) - 1
    cache.reorder_cache(row_to_group)
    return logits.index_select(0, row_to_group)


def sample(
    model, prompts: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams, *, use_cache: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``responses`` [B, R] (right-padded with pad) and ``response_mask`` [B, R], on the model's device."""
    responses, mask, _ = sample_with_log_probs(model, prompts, prompt_mask, params, use_cache=use_cache)
    return responses, mask


@torch.no_grad()
def sample_with_log_probs(
    model, prompts: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams, *, use_cache: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``sample``'s responses and mask, and each response token's log-prob as sampled [B, R] float32."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    prompts, prompt_mask = prompts.to(device), prompt_mask.to(device).long()
    batch, width = prompts.shape
    steps = params.max_new_tokens
    generator = None if params.greedy else torch.Generator(device=device).manual_seed(params.seed)
    eos = torch.tensor(params.eos_token_ids, device=device)
    out = torch.full((batch, steps), params.pad_token_id, dtype=torch.long, device=device)
    log_probs = torch.zeros((batch, steps), dtype=torch.float32, device=device)
    mask = torch.cat([prompt_mask, torch.ones((batch, steps), dtype=torch.long, device=device)], dim=1)
    positions = position_ids_from_mask(mask)
    rows = torch.arange(batch, device=device)  # the rows of ``out`` still decoding
    done = torch.zeros(batch, dtype=torch.bool, device=device)  # which of ``rows`` has hit EOS
    last = None  # the latest token of each row in ``rows``
    cache = DynamicCache() if use_cache else None
    sync_every = 1 if device.type == "cpu" else SYNC_EVERY
    for t in range(steps):
        end = width + t
        if not use_cache:
            full = torch.cat([prompts[rows], out[rows, :t]], dim=1)
            logits = model(
                input_ids=full,
                attention_mask=mask[rows, :end],
                position_ids=positions[rows, :end],
                use_cache=False,
                logits_to_keep=1,
            ).logits[:, -1]
        elif t == 0:
            logits = _prefill(model, prompts, mask[:, :width], positions[:, :width], cache)
        else:
            logits = model(
                input_ids=last[:, None],
                attention_mask=mask[rows, :end],
                position_ids=positions[rows, end - 1 : end],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            ).logits[:, -1]
        processed = processed_logits(logits, params)
        last = draw(processed, params, generator).masked_fill(done, params.pad_token_id)
        out[rows, t] = last
        log_probs[rows, t] = processed.gather(-1, last[:, None]).squeeze(-1) - processed.logsumexp(-1)
        done |= torch.isin(last, eos)
        if (t + 1) % sync_every == 0:
            stopped = int(done.sum())
            if stopped == len(rows):
                break
            if stopped * 4 >= len(rows):  # drop the finished rows from the decode batch
                keep = (~done).nonzero().squeeze(-1)
                if cache is not None:
                    cache.reorder_cache(keep)
                rows, last, done = rows[keep], last[keep], done[keep]
    mask = response_mask_from_tokens(out, params.eos_token_ids)
    return out, mask, log_probs.masked_fill(mask == 0, 0.0)


@torch.no_grad()
def sample_hf(
    model, prompts: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same contract through HF ``generate`` (seeded through a forked global RNG)."""
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    prompts, prompt_mask = prompts.to(device), prompt_mask.to(device).long()
    config = GenerationConfig(
        max_new_tokens=params.max_new_tokens,
        min_new_tokens=0,
        do_sample=not params.greedy,
        temperature=params.temperature if not params.greedy else None,
        top_p=params.top_p if not params.greedy else None,
        top_k=(params.top_k if params.top_k > 0 else 0) if not params.greedy else None,
        eos_token_id=list(params.eos_token_ids),
        pad_token_id=params.pad_token_id,
        bos_token_id=None,
    )
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(params.seed)
        full = model.generate(input_ids=prompts, attention_mask=prompt_mask, generation_config=config)
    new = full[:, prompts.shape[1] :]
    out = torch.full((prompts.shape[0], params.max_new_tokens), params.pad_token_id, dtype=torch.long, device=device)
    out[:, : new.shape[1]] = new
    mask = response_mask_from_tokens(out, params.eos_token_ids)
    return out.masked_fill(mask == 0, params.pad_token_id), mask


def decode_rows_limit(max_num_seqs: int | None, device: torch.device) -> int | None:
    """Rows decoded at once: ``max_num_seqs`` when set; else ``CPU_MAX_NUM_SEQS`` on a CPU, all rows elsewhere."""
    if max_num_seqs is not None:
        return max_num_seqs
    return CPU_MAX_NUM_SEQS if device.type == "cpu" else None


def chunk_seed(seed: int, chunk: int) -> int:
    """The sampling seed of the ``chunk``-th chunk of a call seeded ``seed`` (chunk 0 keeps it)."""
    return (seed + chunk * 1_000_000_007) % (2**63)


Sampler = Callable[[torch.Tensor, torch.Tensor, SamplingParams], tuple]


def sample_in_chunks(
    sampler: Sampler, prompts: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams, max_rows: int | None
) -> tuple:
    """``sampler``'s outputs for every row, decoding at most ``max_rows`` rows per call (None: one call).

    ``sampler(prompts, mask, params)`` returns a tuple of ``[B, R]`` tensors (responses, mask and,
    from the torch loops, log-probs or None), concatenated here in row order.
    """
    rows = prompts.shape[0]
    if max_rows is None or rows <= max_rows:
        return sampler(prompts, prompt_mask, params)
    parts = []
    for chunk, start in enumerate(range(0, rows, max_rows)):
        mask = prompt_mask[start : start + max_rows]
        used = mask.any(0).nonzero()
        first = int(used[0]) if len(used) else 0  # the leading columns every prompt of the chunk pads
        parts.append(
            sampler(
                prompts[start : start + max_rows, first:],
                mask[:, first:],
                replace(params, seed=chunk_seed(params.seed, chunk)),
            )
        )
    return tuple(None if part[0] is None else torch.cat(part) for part in zip(*parts, strict=True))
