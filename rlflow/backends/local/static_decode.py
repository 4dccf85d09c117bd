"""Fixed-shape decoding for the torch rollout: a preallocated KV cache, one step function, CUDA graph replay on a GPU.

``sample_static`` has the contract of ``generation.sample_with_log_probs`` (responses, response mask, log-probs
as sampled). Design notes: docs/design/generation.md.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

import torch
from transformers import Cache

from rlflow.backends.local.attention import attention
from rlflow.backends.local.generation import (
    SamplingParams,
    position_ids_from_mask,
    processed_logits,
    response_mask_from_tokens,
    shared_prompt_starts,
)

SYNC_EVERY = 16
WARMUP_STEPS = 3
SUPPORTED_ATTENTION = ("sdpa", "eager")
BATCH_QUANTUM = 8  # rows of a decoder are a multiple of this
LENGTH_QUANTUM = 64  # and its cache slots (a multiple of 16 also keeps SDPA's mask rows aligned)
MAX_DECODERS = 4  # shape buckets kept per engine


def use_static_decode(model) -> bool:
    """The torch rollout's choice: the static loop on CUDA when the model allows it, else ``sample_with_log_probs``."""
    return next(model.parameters()).device.type == "cuda" and static_decode_supported(model)


def static_decode_supported(model) -> bool:
    """Whether ``sample_static`` can run ``model``: sdpa or eager attention, full attention in every layer."""
    config = model.config
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    return getattr(config, "_attn_implementation", None) in SUPPORTED_ATTENTION and kinds == {"full_attention"}


class SlotCache(Cache):
    """Per-layer keys and values ``[B, H, length, D]``, written at ``index`` (a device tensor of slots).

    Allocated on the first write of each layer (shapes and dtype from the model's own key
    states). ``index`` is read at every ``update``, so moving it on in place moves every layer.
    """

    is_compileable = True

    def __init__(self, length: int, index: torch.Tensor) -> None:
        super().__init__(layers=[])  # transformers' own layer objects stay unused
        self.length = length
        self.index = index
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        if layer_idx == len(self.keys):
            batch, heads, _, _ = key_states.shape
            self.keys.append(key_states.new_zeros((batch, heads, self.length, key_states.shape[-1])))
            self.values.append(value_states.new_zeros((batch, heads, self.length, value_states.shape[-1])))
        self.keys[layer_idx].index_copy_(2, self.index, key_states)
        self.values[layer_idx].index_copy_(2, self.index, value_states)
        return self.keys[layer_idx], self.values[layer_idx]


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where ``allowed``, the dtype's minimum elsewhere (same shape, ``dtype``)."""
    return (~allowed).to(dtype) * torch.finfo(dtype).min


def prefill_mask(prompt_mask: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """``[B, 1, W, length]``: causal over real prompt tokens, and every position sees itself."""
    width = prompt_mask.shape[1]
    q = torch.arange(width, device=prompt_mask.device)[:, None]
    kv = torch.arange(length, device=prompt_mask.device)[None, :]
    real = torch.zeros((prompt_mask.shape[0], length), dtype=torch.bool, device=prompt_mask.device)
    real[:, :width] = prompt_mask.bool()
    allowed = ((kv <= q) & real[:, None, :]) | (kv == q)
    return additive_mask(allowed[:, None], dtype)


def bucket(n: int, quantum: int) -> int:
    """``n`` rounded up to a multiple of ``quantum``."""
    return -(-n // quantum) * quantum


class StaticDecoder:
    """The static tensors of one shape bucket and the fixed-shape ``step`` over them, reused across calls.

    ``rows`` and ``length`` are the bucket's batch and cache length; a call (``start``) fills the
    first ``B`` rows and marks the others done from the start (they decode pad, attending to one
    slot). ``graph`` is the captured step once one has been captured (CUDA).
    """

    def __init__(self, model, rows: int, length: int, params: SamplingParams, device: torch.device) -> None:
        self.model, self.params = model, params
        config = model.config
        steps = params.max_new_tokens
        self.dtype = next(model.parameters()).dtype
        self.layer_kinds = sorted(set(getattr(config, "layer_types", None) or ["full_attention"]))
        self.generator = None if params.greedy else torch.Generator(device=device)
        self.eos = torch.tensor(params.eos_token_ids, device=device)
        self.out = torch.full((rows, steps), params.pad_token_id, dtype=torch.long, device=device)
        self.log_probs = torch.zeros((rows, steps), dtype=torch.float32, device=device)
        self.done = torch.zeros(rows, dtype=torch.bool, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)  # where the next token goes in ``out``
        self.slot = torch.zeros(1, dtype=torch.long, device=device)  # where the next token's K/V go
        self.pos = torch.zeros((rows, 1), dtype=torch.long, device=device)  # the next token's position id
        self.real = torch.zeros((rows, length), dtype=torch.bool, device=device)  # slots holding a real token
        self.last = torch.zeros(rows, dtype=torch.long, device=device)
        self.noise: torch.Tensor | None = None  # [rows, V] once the vocabulary is seen (never when greedy)
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (rows, heads, length, head_dim)
        self.cache = SlotCache(length, self.slot)
        self.cache.keys = [torch.zeros(shape, dtype=self.dtype, device=device) for _ in range(config.num_hidden_layers)]
        self.cache.values = [torch.zeros_like(k) for k in self.cache.keys]
        self.batch = 0  # rows of the current call
        self.graph = None

    def start(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, starts: torch.Tensor | None, seed: int) -> None:
        """Reset every buffer for a call on ``prompts`` [B, W] (``starts``: shared-prompt runs) and emit token 0."""
        batch, width = prompts.shape
        self.batch = batch
        if self.generator is not None:
            self.generator.manual_seed(seed)
        self.out.fill_(self.params.pad_token_id)
        self.log_probs.zero_()
        self.done.fill_(True)
        self.done[:batch] = False
        self.column.zero_()
        self.slot.fill_(width)
        self.pos.zero_()
        self.pos[:batch] = prompt_mask.sum(-1, keepdim=True)
        self.real.zero_()
        self.real[:batch, :width] = prompt_mask.bool()
        self.real[batch:, 0] = True  # a padding row attends to one slot: finite, never read
        logits = self._prefill(prompts, prompt_mask, starts)
        if self.generator is not None and self.noise is None:
            self.noise = logits.new_ones((self.out.shape[0], logits.shape[-1]), dtype=torch.float32)
        self.fill_noise()
        self._emit(torch.nn.functional.pad(logits, (0, 0, 0, self.out.shape[0] - batch)))

    def _prefill(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, starts: torch.Tensor | None) -> torch.Tensor:
        """Last-position logits [B, V]; fills the cache's first B rows and W slots; a repeated prompt is encoded once."""
        batch, width = prompts.shape
        if starts is not None:
            first = starts.nonzero().squeeze(-1).to(prompts.device)
            prompts, prompt_mask = prompts[first], prompt_mask[first]
        cache = SlotCache(width, torch.arange(width, device=prompts.device))
        mask = prefill_mask(prompt_mask, width, self.dtype)
        logits = self.model(
            input_ids=prompts,
            attention_mask=dict.fromkeys(self.layer_kinds, mask),
            position_ids=position_ids_from_mask(prompt_mask),
            cache_position=cache.index,  # given, so the model never asks the cache its length
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        row_to_group = None if starts is None else (starts.long().cumsum(0) - 1).to(prompts.device)
        for mine, theirs in zip(self.cache.keys + self.cache.values, cache.keys + cache.values, strict=True):
            mine[:batch, :, :width].copy_(theirs if row_to_group is None else theirs.index_select(0, row_to_group))
        return logits if row_to_group is None else logits.index_select(0, row_to_group)

    def fill_noise(self) -> None:
        """Draw the next step's exponential-race noise for the call's rows (nothing when greedy)."""
        if self.noise is not None:
            self.noise[: self.batch].exponential_(1.0, generator=self.generator)

    def _emit(self, logits: torch.Tensor) -> None:
        """Draw from ``logits`` [B, V], write the token and its log-prob at ``column``, update ``done``."""
        processed = processed_logits(logits, self.params)
        if self.noise is None:
            token = processed.argmax(-1)
        else:
            token = (processed.softmax(-1) / self.noise).argmax(-1)
        token = token.masked_fill(self.done, self.params.pad_token_id)
        log_prob = processed.gather(-1, token[:, None]) - processed.logsumexp(-1, keepdim=True)
        self.out.index_copy_(1, self.column, token[:, None])
        self.log_probs.index_copy_(1, self.column, log_prob)
        self.done |= (token[:, None] == self.eos).any(-1)
        self.last.copy_(token)
        self.column.add_(1)

    def step(self) -> None:
        """One token for every row: fixed shapes, no host sync (the function a CUDA graph captures)."""
        self.real.index_fill_(1, self.slot, True)
        mask = additive_mask(self.real[:, None, None, :], self.dtype)
        logits = self.model(
            input_ids=self.last[:, None],
            attention_mask=dict.fromkeys(self.layer_kinds, mask),
            position_ids=self.pos,
            cache_position=self.slot,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        self._emit(logits)
        self.pos.add_(1)
        self.slot.add_(1)

    def all_done(self) -> bool:
        return bool(self.done.all())

    def results(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of the call's tokens and log-probs (the buffers belong to the next call)."""
        return self.out[: self.batch].clone(), self.log_probs[: self.batch].clone()


class DecodeGraphs:
    """Static decoders by shape bucket, kept between calls (the engine holds one): each captures its graph once.

    The key is (model, batch bucket, cache-length bucket, sampling params but the seed): the
    captured step bakes in shapes, the sampling transform and the model's parameter addresses,
    which stay put (updates and weight loads copy into them). At most ``max_entries`` are kept,
    the least recently used dropped first, so the memory held for decoding stays bounded.
    """

    def __init__(self, max_entries: int = MAX_DECODERS) -> None:
        self.max_entries = max_entries
        self.entries: OrderedDict[tuple, StaticDecoder] = OrderedDict()
        self.builds = 0  # decoders built, each with its own buffers and (on CUDA) one capture

    def get(self, model, batch: int, length: int, params: SamplingParams, device: torch.device) -> StaticDecoder:
        first = next(model.parameters())
        key = (
            id(model),
            first.data_ptr(),
            first.dtype,
            bucket(batch, BATCH_QUANTUM),
            bucket(length, LENGTH_QUANTUM),
            replace(params, seed=0),
        )
        decoder = self.entries.pop(key, None)
        if decoder is None:
            decoder = StaticDecoder(model, key[3], key[4], params, device)
            self.builds += 1
            while len(self.entries) >= self.max_entries:
                self.entries.popitem(last=False)
        self.entries[key] = decoder
        return decoder


def _decode_eagerly(decoder: StaticDecoder, steps: int, check_every: int) -> None:
    for t in range(1, steps):
        if (t - 1) % check_every == 0 and decoder.all_done():
            return
        decoder.fill_noise()
        decoder.step()


def _decode_with_graph(decoder: StaticDecoder, steps: int, check_every: int) -> None:
    """Steps 1.. by replaying the decoder's graph; the first call runs ``WARMUP_STEPS`` eagerly, then captures."""
    t = 1
    if decoder.graph is None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            while t < min(steps, 1 + WARMUP_STEPS):
                decoder.fill_noise()
                decoder.step()
                t += 1
        torch.cuda.current_stream().wait_stream(side)
        if t >= steps or decoder.all_done():
            return
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            decoder.step()  # recorded, not run: the state is still that of step t
        decoder.graph = graph
    while t < steps:
        decoder.fill_noise()
        decoder.graph.replay()
        t += 1
        if t % check_every == 0 and decoder.all_done():
            return


@torch.no_grad()
def sample_static(
    model,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    params: SamplingParams,
    *,
    graph: bool | None = None,
    check_every: int | None = None,
    graphs: DecodeGraphs | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``responses`` [B, R], ``response_mask`` [B, R] and log-probs as sampled [B, R] float32, on the model's device.

    ``graph``: replay the step as a CUDA graph (default: when the model is on CUDA; CUDA only).
    ``check_every``: steps between "all rows done?" checks (default 1 on the CPU, ``SYNC_EVERY`` else).
    ``graphs``: where decoders are kept between calls (default: a fresh one, used for this call only).
    """
    device = next(model.parameters()).device
    graph = device.type == "cuda" if graph is None else graph
    if graph and device.type != "cuda":
        raise ValueError(f"sample_static: a CUDA graph needs the model on a CUDA device, not {device}")
    if not static_decode_supported(model):
        raise ValueError(
            f"sample_static: needs {' or '.join(SUPPORTED_ATTENTION)} attention and no sliding-window layers "
            f"(model has {model.config._attn_implementation!r}); use generation.sample_with_log_probs"
        )
    check_every = check_every or (1 if device.type == "cpu" else SYNC_EVERY)
    starts = shared_prompt_starts(prompts.cpu(), prompt_mask.cpu())  # on the host: no device sync
    prompts, prompt_mask = prompts.to(device), prompt_mask.to(device).long()
    steps = params.max_new_tokens
    length = prompts.shape[1] + max(steps - 1, 0)  # the last drawn token never enters the cache
    decoder = (graphs or DecodeGraphs(max_entries=1)).get(model, prompts.shape[0], length, params, device)
    with attention(model):
        decoder.start(prompts, prompt_mask, starts, params.seed)
        if graph:
            _decode_with_graph(decoder, steps, check_every)
        else:
            _decode_eagerly(decoder, steps, check_every)
    out, log_probs = decoder.results()
    mask = response_mask_from_tokens(out, params.eos_token_ids)
    return out, mask, log_probs.masked_fill(mask == 0, 0.0)
