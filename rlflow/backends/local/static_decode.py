"""Fixed-shape decoding for the torch rollout: a preallocated KV cache, one step function, CUDA graph replay on a GPU.

``sample_static`` has the contract of ``generation.sample_with_log_probs`` (responses, response
mask, log-probs as sampled). Design decisions:

- The KV cache is our own per-layer tensors ``[B, kv_heads, W + R - 1, head_dim]`` (``SlotCache``,
  W the prompt width, R ``max_new_tokens``; the last drawn token never enters the cache), written
  at a device-side slot index that the step moves on in place. It only implements the one call
  the attention layers make, ``update``, so nothing depends on how a transformers release lays
  out ``StaticCache`` (5.x moved its write position from ``cache_position`` to a counter).
- Every step has the same shapes: finished rows are not dropped (as ``sample_with_log_probs``
  does) but masked, their token forced to pad. Their forward is wasted work, which the graph
  replay more than pays back on a GPU; on the CPU, where launches are cheap and dropping rows
  is what saves time, ``sample_with_log_probs`` stays the default.
- The attention mask is built here and handed to the model prepared (``attention_mask`` as a
  ``{layer type: 4-D additive mask}`` dict, which transformers' decoder models pass straight to
  their layers): a float ``[B, 1, q, kv]`` mask (0 or the dtype's minimum), which both the
  ``sdpa`` and the ``eager`` attention take. The decode step keeps a ``[B, kv]`` "slot holds a
  real token" tensor and sets the new slot in place, so mask construction has no host sync and
  no data-dependent shape. Other attention implementations (flash attention takes 2-D masks)
  and sliding-window layers are not supported: ``static_decode_supported`` says so and the
  engine keeps the dynamic loop for them.
- Prefill: as in ``sample_with_log_probs``, a run of identical prompts (GRPO's n samples side
  by side) is encoded once and its cache rows are fanned out (``index_select``) to the run.
  Every prompt position may attend to itself, so a left-padding position never has an
  all-masked row (its output would be NaN and poison the cache slots later masked out).
- The step (the model on the last token, ``processed_logits``, the draw, the log-prob, writes
  into the ``[B, R]`` outputs at a device-side column, the done update) reads and writes only
  tensors allocated before it first runs. On CUDA it is captured once into a
  ``torch.cuda.CUDAGraph`` after ``WARMUP_STEPS`` real steps on a side stream (the warm-up the
  torch docs ask for is real decoding, nothing is rolled back), then replayed once per token.
  On the CPU the same function runs eagerly, so the CPU tests cover every op of the graph.
- Randomness stays outside the graph: before each step the exponential-race noise for that
  step is drawn into a static ``[B, V]`` buffer from a ``torch.Generator`` seeded per call.
  Drawing all steps up front would take ``R x B x V`` floats (20 GB for 256 x 128 x 152k); one
  step's buffer is ~80 MB and the draw is one kernel. Same seed, same tokens; greedy draws no
  noise at all. The first step's noise is the one ``sample_with_log_probs`` draws, so the two
  loops agree while no row has been dropped, and token for token whenever greedy.
- The only host sync is "have all rows hit EOS?", every ``SYNC_EVERY`` steps on a GPU (every
  step on the CPU), outside the captured region.
"""

from __future__ import annotations

import torch
from transformers import Cache

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

    def fan_out(self, rows: torch.Tensor, index: torch.Tensor) -> SlotCache:
        """A cache whose row i is this cache's row ``rows[i]``, written next at ``index``."""
        out = SlotCache(self.length, index)
        out.keys = [k.index_select(0, rows) for k in self.keys]
        out.values = [v.index_select(0, rows) for v in self.values]
        return out


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


class StaticDecoder:
    """The static tensors of one ``sample_static`` call and the fixed-shape ``step`` over them."""

    def __init__(self, model, prompts: torch.Tensor, prompt_mask: torch.Tensor, params: SamplingParams) -> None:
        self.model, self.params = model, params
        device = prompts.device
        batch, width = prompts.shape
        steps = params.max_new_tokens
        length = width + max(steps - 1, 0)
        self.dtype = next(model.parameters()).dtype
        self.layer_kinds = sorted(set(getattr(model.config, "layer_types", None) or ["full_attention"]))
        self.generator = None if params.greedy else torch.Generator(device=device).manual_seed(params.seed)
        self.eos = torch.tensor(params.eos_token_ids, device=device)
        self.out = torch.full((batch, steps), params.pad_token_id, dtype=torch.long, device=device)
        self.log_probs = torch.zeros((batch, steps), dtype=torch.float32, device=device)
        self.done = torch.zeros(batch, dtype=torch.bool, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)  # where the next token goes in ``out``
        self.slot = torch.full((1,), width, dtype=torch.long, device=device)  # where the next token's K/V go
        self.pos = prompt_mask.sum(-1, keepdim=True)  # the next token's position id [B, 1]
        self.real = torch.zeros((batch, length), dtype=torch.bool, device=device)  # slots holding a real token
        self.real[:, :width] = prompt_mask.bool()
        logits, self.cache = self._prefill(prompts, prompt_mask, length)
        self.noise = None if params.greedy else torch.empty(logits.shape, dtype=torch.float32, device=device)
        self.last = torch.zeros(batch, dtype=torch.long, device=device)
        self.fill_noise()
        self._emit(logits)

    def _prefill(self, prompts: torch.Tensor, prompt_mask: torch.Tensor, length: int):
        """Last-position logits [B, V] and the cache of every row; a repeated prompt is encoded once."""
        width = prompts.shape[1]
        starts = shared_prompt_starts(prompts, prompt_mask)
        first = None if starts is None else starts.nonzero().squeeze(-1)
        if first is not None:
            prompts, prompt_mask = prompts[first], prompt_mask[first]
        cache = SlotCache(length, torch.arange(width, device=prompts.device))
        mask = prefill_mask(prompt_mask, length, self.dtype)
        logits = self.model(
            input_ids=prompts,
            attention_mask=dict.fromkeys(self.layer_kinds, mask),
            position_ids=position_ids_from_mask(prompt_mask),
            cache_position=cache.index,  # given, so the model never asks the cache its length
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        if first is None:
            cache.index = self.slot
            return logits, cache
        row_to_group = starts.long().cumsum(0) - 1
        return logits.index_select(0, row_to_group), cache.fan_out(row_to_group, self.slot)

    def fill_noise(self) -> None:
        """Draw the next step's exponential-race noise (nothing when greedy)."""
        if self.noise is not None:
            self.noise.exponential_(1.0, generator=self.generator)

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


def _decode_eagerly(decoder: StaticDecoder, steps: int, check_every: int) -> None:
    for t in range(1, steps):
        if (t - 1) % check_every == 0 and decoder.all_done():
            return
        decoder.fill_noise()
        decoder.step()


def _decode_with_graph(decoder: StaticDecoder, steps: int, check_every: int) -> None:
    """Steps 1.. : ``WARMUP_STEPS`` eagerly on a side stream, then one captured step replayed per token."""
    t = 1
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
    while t < steps:
        decoder.fill_noise()
        graph.replay()
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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``responses`` [B, R], ``response_mask`` [B, R] and log-probs as sampled [B, R] float32, on the model's device.

    ``graph``: replay the step as a CUDA graph (default: when the model is on CUDA; CUDA only).
    ``check_every``: steps between "all rows done?" checks (default 1 on the CPU, ``SYNC_EVERY`` else).
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
    prompts, prompt_mask = prompts.to(device), prompt_mask.to(device).long()
    steps = params.max_new_tokens
    decoder = StaticDecoder(model, prompts, prompt_mask, params)
    if graph:
        _decode_with_graph(decoder, steps, check_every)
    else:
        _decode_eagerly(decoder, steps, check_every)
    mask = response_mask_from_tokens(decoder.out, params.eos_token_ids)
    return decoder.out, mask, decoder.log_probs.masked_fill(mask == 0, 0.0)
