"""Log-probabilities (and entropy) of response tokens under a model, micro-batched.

One forward per micro-batch at the rollout's temperature, with verl's per-token math; a prompt shared by n
samples is encoded once, or the rows run packed (``model.use_remove_padding``). The same code serves inference
and the actor update. Design notes: docs/design/logprob.md.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlflow.backends.local import attention
from rlflow.backends.local.generation import position_ids_from_mask, shared_prompt_starts
from rlflow.backends.local.micro_batches import micro_batch_rows
from rlflow.batch import Batch, response_span

CHUNK_ELEMENTS = 1 << 26  # float32 logits per log-softmax chunk (256 MB)


def forward_log_probs(
    model,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    packed: bool = False,
    topk_ids: torch.Tensor | None = None,
):
    """``log_probs`` [B, R] (and ``entropy`` [B, R] when asked) on the model's device; ``packed``: without padding.

    ``topk_ids`` [B, R, K] (on-policy distillation's forward_kl_topk: the teacher's top-k ids): a third
    value is returned, ``StudentTopK`` of the same logits (the log-softmax at those ids, with its
    gradient, and the model's own top-k ids); without it the pass is unchanged.

    Everything that decides shapes (trimming, shared prompts, packing offsets) is computed on the
    host from the host tensors, so the device is never asked for a value mid-pass.
    """
    device = next(model.parameters()).device
    full_width = responses.shape[1]
    prompts, prompt_mask, responses, response_mask = trim_padding(
        prompts.cpu(), prompt_mask.cpu().long(), responses.cpu(), response_mask.cpu().long()
    )
    if topk_ids is not None:
        topk_ids = topk_ids[:, : responses.shape[1]].to(device, non_blocking=True)
    attended = response_span(response_mask)  # a transcript's tool answers are read, not scored
    if packed:
        log_probs, entropy, topk = _packed_log_probs(
            model, device, prompts, prompt_mask, responses, response_mask, temperature, with_entropy, attended, topk_ids
        )
    else:
        logits = _response_logits(model, device, prompts, prompt_mask, responses, attended)
        log_probs, entropy = token_log_probs(
            logits, responses.to(device, non_blocking=True), temperature=temperature, with_entropy=with_entropy
        )
        topk = None if topk_ids is None else student_topk(logits, topk_ids, temperature=temperature)
    out = (_pad_right(log_probs, full_width), None if entropy is None else _pad_right(entropy, full_width))
    if topk_ids is None:
        return out
    return (*out, StudentTopK(_pad_right(topk.log_probs, full_width), _pad_right(topk.ids, full_width)))


class StudentTopK(NamedTuple):
    """The student's side of forward_kl_topk: [B, R, K] each (zero past the trimmed width)."""

    log_probs: torch.Tensor  # log_softmax(logits) at the teacher's top-k ids (verl: student_topk_log_probs)
    ids: torch.Tensor  # the student's own top-k ids (verl: student_topk_ids, for the overlap metrics)


def _response_logits(
    model,
    device: torch.device,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    attended: torch.Tensor,
) -> torch.Tensor:
    """Logits [B, R, V] predicting each response token (host tensors in), prompts shared when they may."""
    starts = shared_prompt_starts(prompts, prompt_mask) if _may_share_prompts(model) else None
    on = {"device": device, "non_blocking": True}
    prompts, prompt_mask, responses, attended = (t.to(**on) for t in (prompts, prompt_mask, responses, attended))
    if starts is None:
        return _joint_logits(model, prompts, prompt_mask, responses, attended)
    return _shared_prefix_logits(model, prompts, prompt_mask, responses, attended, starts)


def forward_topk_log_probs(
    model,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    k: int,
    *,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's top-k log-probs [B, R, k] (float32) and their ids [B, R, k] (int64) at each response
    position, zero outside ``response_mask`` (a teacher's side of forward_kl_topk)."""
    device = next(model.parameters()).device
    full_width = responses.shape[1]
    prompts, prompt_mask, responses, response_mask = trim_padding(
        prompts.cpu(), prompt_mask.cpu().long(), responses.cpu(), response_mask.cpu().long()
    )
    logits = _response_logits(model, device, prompts, prompt_mask, responses, response_span(response_mask))
    values, ids = topk_log_probs(logits, k, temperature=temperature)
    scored = response_mask.to(device, non_blocking=True).bool()[..., None]
    values, ids = values.masked_fill(~scored, 0.0), ids.masked_fill(~scored, 0)
    return _pad_right(values, full_width), _pad_right(ids, full_width)


def topk_log_probs(
    logits: torch.Tensor, k: int, *, temperature: float = 1.0, chunk_elements: int = CHUNK_ELEMENTS
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k of ``log_softmax(logits / temperature)`` ([..., V] -> values, ids [..., k]), float32 row chunks."""
    flat = logits.reshape(-1, logits.shape[-1])
    rows = max(1, chunk_elements // max(flat.shape[-1], 1))
    values, ids = [], []
    for start in range(0, flat.shape[0], rows):
        x = _float_chunk(flat[start : start + rows], temperature)
        top = x.topk(k, dim=-1)
        values.append(top.values - x.logsumexp(-1, keepdim=True))  # log_softmax is monotonic: same ids
        ids.append(top.indices)
    shape = (*logits.shape[:-1], k)
    if not values:
        return logits.new_zeros(shape, dtype=torch.float32), torch.zeros(shape, dtype=torch.long, device=logits.device)
    return torch.cat(values).view(shape), torch.cat(ids).view(shape)


def student_topk(
    logits: torch.Tensor, topk_ids: torch.Tensor, *, temperature: float = 1.0, chunk_elements: int = CHUNK_ELEMENTS
) -> StudentTopK:
    """``log_softmax(logits)`` at ``topk_ids`` and the logits' own top-k ids (verl's ``compute_forward_kl_topk``
    student side; ``x[ids] - logsumexp(x)`` in float32 row chunks, as verl's ``_chunked_topk_log_probs``)."""
    k = topk_ids.shape[-1]
    flat, flat_ids = logits.reshape(-1, logits.shape[-1]), topk_ids.reshape(-1, k)
    rows = max(1, chunk_elements // max(flat.shape[-1], 1))
    gathered, own = [], []
    for start in range(0, flat.shape[0], rows):
        x = _float_chunk(flat[start : start + rows], temperature)
        gathered.append(x.gather(-1, flat_ids[start : start + rows]) - x.logsumexp(-1, keepdim=True))
        own.append(x.detach().topk(k, dim=-1).indices)
    shape = topk_ids.shape
    if not gathered:
        return StudentTopK(logits.new_zeros(shape, dtype=torch.float32), torch.zeros_like(topk_ids))
    return StudentTopK(torch.cat(gathered).view(shape), torch.cat(own).view(shape))


def _float_chunk(x: torch.Tensor, temperature: float) -> torch.Tensor:
    """A chunk of logits as float32 (half precision read up), divided by the temperature."""
    x = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    return x / temperature if temperature != 1.0 else x


def token_log_probs(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each label under ``logits / temperature`` ([..., V] -> [...], half read as float32), and entropy.

    verl's ``logprobs_from_logits`` and ``entropy_from_logits`` math (``x[label] - logsumexp(x)``;
    ``logsumexp(x) - sum(softmax(x) * x)``) over row chunks of at most ``chunk_elements`` values:
    a few kernels per chunk instead of verl's fallback loop of one per row, and only one chunk of
    float32 logits alive at a time.
    """
    shape = labels.shape
    flat, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    rows = max(1, chunk_elements // max(flat.shape[-1], 1))
    log_probs, entropys = [], []
    for start in range(0, flat.shape[0], rows):
        x = flat[start : start + rows]
        x = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
        if temperature != 1.0:
            x = x / temperature
        lse = x.logsumexp(-1)
        log_probs.append(x.gather(-1, labels[start : start + rows, None]).squeeze(-1) - lse)
        if with_entropy:
            entropys.append(lse - (x.softmax(-1) * x).sum(-1))
    if not log_probs:
        empty = logits.new_zeros(shape, dtype=torch.promote_types(logits.dtype, torch.float32))
        return empty, empty.clone() if with_entropy else None
    out = torch.cat(log_probs).view(shape)
    return out, torch.cat(entropys).view(shape) if with_entropy else None


def _packed_log_probs(
    model,
    device: torch.device,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    attended: torch.Tensor,
    topk_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, StudentTopK | None]:
    """``log_probs`` (and ``entropy``, ``StudentTopK`` at ``topk_ids``) [B, R] from one forward over the rows'
    real tokens packed into one sequence.

    ``attended``: the response tokens in the sequence (``response_span``); ``response_mask``: those scored.

    The packing (which tokens, their positions, the rows' offsets) is laid out on the host. With
    ``sdpa`` attention the rows' offsets go to ``attention.rlflow_attention`` (no mask at all);
    other attention implementations get transformers' own packed handling (rows found from the
    position ids).
    """
    mask = torch.cat([prompt_mask, attended], dim=1).bool()
    input_ids = torch.cat([prompts, responses], dim=1)
    slot = mask.flatten().long().cumsum(0).view_as(mask) - 1  # each kept token's place in the packed sequence
    scored = response_mask.bool()
    rows, cols = scored.nonzero(as_tuple=True)
    on = {"device": device, "non_blocking": True}
    inner = getattr(model, "module", model)  # a DeepSpeed engine wraps the HF model
    kwargs = {"attention_mask": None}
    if attention.supported(inner):
        layer_kinds = set(getattr(inner.config, "layer_types", None) or ["full_attention"])
        kwargs = {
            "attention_mask": dict.fromkeys(layer_kinds),
            "varlen": attention.Varlen.from_lengths(mask.sum(-1).tolist(), device),
        }
    with attention.attention(inner):
        logits = model(
            input_ids=input_ids[mask][None].to(**on),
            position_ids=position_ids_from_mask(mask.long())[mask][None].to(**on),
            use_cache=False,
            logits_to_keep=(slot[:, prompts.shape[1] :][scored] - 1).to(**on),  # the token before predicts it
            **kwargs,
        ).logits[0]
    labels = responses[rows, cols].to(**on)
    log_probs, entropy = token_log_probs(logits, labels, temperature=temperature, with_entropy=with_entropy)
    rows, cols = rows.to(**on), cols.to(**on)
    shape = responses.shape
    out = log_probs.new_zeros(shape).index_put((rows, cols), log_probs)
    topk = None
    if topk_ids is not None:  # the scored positions' values, scattered back to [B, R, K]
        part = student_topk(logits, topk_ids[rows, cols], temperature=temperature)
        wide = (*shape, topk_ids.shape[-1])
        topk = StudentTopK(
            part.log_probs.new_zeros(wide).index_put((rows, cols), part.log_probs),
            part.ids.new_zeros(wide).index_put((rows, cols), part.ids),
        )
    if entropy is None:
        return out, None, topk
    return out, entropy.new_zeros(shape).index_put((rows, cols), entropy), topk


def _may_share_prompts(model) -> bool:
    """False while gradient checkpointing recomputes layers: it turns the KV cache off in training."""
    inner = getattr(model, "module", model)  # a DeepSpeed engine wraps the HF model
    return not (torch.is_grad_enabled() and inner.training and getattr(inner, "is_gradient_checkpointing", False))


def _joint_logits(
    model, prompts: torch.Tensor, prompt_mask: torch.Tensor, responses: torch.Tensor, attended: torch.Tensor
) -> torch.Tensor:
    """Logits [B, R, V] that predict each response token: one forward over prompt + response."""
    mask = torch.cat([prompt_mask, attended], dim=1)
    input_ids = torch.cat([prompts, responses], dim=1)
    return model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=position_ids_from_mask(mask),
        use_cache=False,
        logits_to_keep=responses.shape[1] + 1,
    ).logits[:, :-1]


def _shared_prefix_logits(
    model,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    responses: torch.Tensor,
    attended: torch.Tensor,
    starts: torch.Tensor,
) -> torch.Tensor:
    """The same logits, each prompt encoded once and its KV cache fanned out to the rows that share it.

    The prompt's last token runs with the responses, so that every logit that is scored comes
    out of one forward (the same matmul shapes for an actor and its reference copy, which then
    agree bit for bit).
    """
    from transformers import DynamicCache

    head = prompts.shape[1] - 1  # prompts are left-padded: the last column is a real token of every row
    feed = torch.cat([prompts[:, head:], responses[:, :-1]], dim=1)  # the last response token predicts nothing scored
    mask = torch.cat([prompt_mask, attended[:, :-1]], dim=1)
    positions = position_ids_from_mask(mask)
    cache = DynamicCache()
    if head:
        first = starts.nonzero().squeeze(-1).to(prompts.device, non_blocking=True)
        model(
            input_ids=prompts[first, :head],
            attention_mask=prompt_mask[first, :head],
            position_ids=positions[first, :head],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        cache.reorder_cache((starts.long().cumsum(0) - 1).to(prompts.device, non_blocking=True))  # row -> its group
    return model(
        input_ids=feed, attention_mask=mask, position_ids=positions[:, head:], past_key_values=cache, use_cache=True
    ).logits


def trim_padding(
    prompts: torch.Tensor, prompt_mask: torch.Tensor, responses: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same rows without the leading prompt columns and trailing response columns that every row masks."""
    start = int(prompt_mask.bool().any(0).to(torch.int8).argmax())  # the first used column; 0 when none is
    used_response = response_mask.bool().any(0).nonzero()
    end = int(used_response[-1]) + 1 if len(used_response) else responses.shape[1]
    return prompts[:, start:], prompt_mask[:, start:], responses[:, :end], response_mask[:, :end]


def _pad_right(values: torch.Tensor, width: int) -> torch.Tensor:
    """``values`` [B, w] (or [B, w, K]) widened to [B, width] with zeros (the response positions that were cut)."""
    trailing = (0, 0) * (values.dim() - 2)
    return torch.nn.functional.pad(values, (*trailing, 0, width - values.shape[1]))


@torch.no_grad()
def batch_log_probs(
    model,
    batch: Batch,
    *,
    micro_batch_size: int | None,
    temperature: float,
    with_entropy: bool,
    max_token_len: int | None = None,
    packed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropy) of every row of ``batch`` on the CPU: ``micro_batch_size`` rows per forward,
    or micro-batches of at most ``max_token_len`` tokens when it is set (see ``micro_batches``)."""
    parts = micro_batch_rows(
        batch, micro_batch_size=micro_batch_size, max_token_len=max_token_len, keep_groups=not packed
    )
    return log_probs_by_parts(model, batch, parts, temperature=temperature, with_entropy=with_entropy, packed=packed)


def log_probs_by_parts(
    model,
    batch: Batch,
    parts: list[list[int]],
    *,
    temperature: float,
    with_entropy: bool,
    packed: bool,
    on_empty=None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropy) of the rows of ``batch``, one forward per list of ``parts``, back in row order.

    ``on_empty()`` runs for an empty part (an engine whose ranks must run equal forward counts).
    """
    shape = (len(batch), batch["responses"].shape[1])
    log_probs = torch.zeros(shape)
    entropys = torch.zeros(shape) if with_entropy else None
    for rows in parts:
        if not rows:
            if on_empty is not None:
                on_empty()
            continue
        part = batch.index(rows)
        lp, ent = forward_log_probs(
            model,
            part["prompts"],
            part["prompt_mask"],
            part["responses"],
            part["response_mask"],
            temperature=temperature,
            with_entropy=with_entropy,
            packed=packed,
        )
        log_probs[rows] = lp.float().cpu()
        if entropys is not None:
            entropys[rows] = ent.float().cpu()
    return log_probs, entropys
