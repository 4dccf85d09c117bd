"""How well a training update uses its device, reported as verl's engine workers report it.

``perf/mfu/actor`` (verl's FLOPs formula and peak table) and ``actor/perf/*memory*``, the same keys on every
device. Design notes: docs/design/local_actor.md.
"""

from __future__ import annotations

import torch

GIB = 1024**3


def peak_tflops(device: torch.device) -> float:
    """verl's nominal peak of ``device`` in TFLOPS (``inf`` for a GPU verl does not know)."""
    from verl.utils.flops_counter import get_device_flops

    name = "CPU" if device.type == "cpu" else torch.cuda.get_device_name(device)
    return float(get_device_flops(unit="T", device_name=name))


def achieved_tflops(model_config, seqlens: list[int], seconds: float) -> float:
    """TFLOPS of one forward and backward over sequences of ``seqlens`` tokens taking ``seconds``."""
    from verl.utils.flops_counter import ESTIMATE_FUNC

    estimate = ESTIMATE_FUNC.get(model_config.model_type)
    if estimate is None or seconds <= 0:
        return 0.0
    return float(estimate(model_config, sum(seqlens), seqlens, seconds))


DENSE_TYPES = ("qwen2", "llama", "mistral")  # dense decoders with verl's Qwen2/Llama formula


def flops(model_config, encoded_tokens: int, head_tokens: int, attention_pairs: int) -> float:
    """Forward-and-backward FLOPs in verl's conventions (6 x weights x tokens; 6 x pairs x head dim x heads per layer).

    ``encoded_tokens`` go through the decoder layers, ``head_tokens`` through a ``vocab x hidden``
    matmul (verl counts two per token: embedding and LM head), ``attention_pairs`` is verl's sum of
    squared sequence lengths.
    """
    c = model_config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    layer = c.hidden_size * c.intermediate_size * 3 + c.hidden_size * head_dim * (
        2 * c.num_attention_heads + 2 * kv_heads
    )
    dense = 6 * (layer * c.num_hidden_layers * encoded_tokens + c.vocab_size * c.hidden_size * head_tokens)
    return float(dense + 6 * attention_pairs * head_dim * c.num_attention_heads * c.num_hidden_layers)


def useful_flops(model_config, groups: list[tuple[int, list[int]]], *, shared: bool) -> float | None:
    """FLOPs of a forward and backward that computes only what is needed (None for a model type not covered).

    ``groups``: (prompt tokens, [response tokens of each row]) per run of rows with one prompt;
    ``shared``: the prompt is encoded once per run (the shared-prefix path), else once per row
    (packing). The attention term keeps verl's full squares: a shared prompt's P^2 once, and each
    row's (P + r)^2 - P^2.
    """
    if getattr(model_config, "model_type", None) not in DENSE_TYPES:
        return None
    encoded = scored = pairs = 0
    for prompt, responses in groups:
        copies = 1 if shared else len(responses)
        encoded += copies * prompt + sum(responses)
        scored += sum(responses)
        pairs += copies * prompt * prompt + sum((prompt + r) ** 2 - prompt * prompt for r in responses)
    return flops(model_config, encoded, scored, pairs)


def update_perf_metrics(
    model_config, device: torch.device, peak: float, seqlens: list[int], seconds: float, world_size: int
) -> dict[str, float]:
    """``perf/mfu/actor`` and ``actor/perf/*memory*`` for one mini-batch (``seqlens``: every rank's rows)."""
    import psutil

    cuda = device.type == "cuda"
    return {
        "perf/mfu/actor": achieved_tflops(model_config, seqlens, seconds) / peak / world_size,
        "actor/perf/max_memory_allocated_gb": torch.cuda.max_memory_allocated(device) / GIB if cuda else 0.0,
        "actor/perf/max_memory_reserved_gb": torch.cuda.max_memory_reserved(device) / GIB if cuda else 0.0,
        "actor/perf/cpu_memory_used_gb": psutil.virtual_memory().used / GIB,
    }
