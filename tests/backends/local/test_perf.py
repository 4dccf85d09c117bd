"""MFU and memory of a training update: verl's FLOPs formula and device peaks, verl's memory readings."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from rlflow.backends.local.perf import achieved_tflops, flops, peak_tflops, update_perf_metrics, useful_flops


@pytest.fixture(scope="module")
def qwen2_config(tokenizer):
    from rlflow.backends.local.models import load_model
    from rlflow.schemas.pipeline import ModelSpec

    return load_model(ModelSpec(), tokenizer, seed=1).config  # the built-in tiny Qwen2


def test_achieved_flops_are_six_per_dense_parameter_and_token_plus_attention(qwen2_config):
    c = qwen2_config
    head = c.hidden_size // c.num_attention_heads
    attention = c.hidden_size * (2 * c.num_attention_heads + 2 * c.num_key_value_heads) * head
    dense = (
        3 * c.hidden_size * c.intermediate_size + attention
    ) * c.num_hidden_layers + 2 * c.vocab_size * c.hidden_size
    seqlens = [30, 12, 7]
    flops = (
        6 * dense * sum(seqlens) + 6 * sum(s * s for s in seqlens) * head * c.num_attention_heads * c.num_hidden_layers
    )
    assert achieved_tflops(c, seqlens, 2.0) == pytest.approx(flops / 2.0 / 1e12, rel=1e-12)


def test_a_model_type_without_a_formula_gives_zero():
    config = AutoConfig.for_model("gpt2")
    assert achieved_tflops(config, [10, 20], 1.0) == 0.0


def test_the_cpu_peak_is_verls_nominal_figure():
    assert peak_tflops(torch.device("cpu")) == pytest.approx(0.448)


def test_update_metrics_on_the_cpu(qwen2_config):
    seqlens = [40, 40]
    metrics = update_perf_metrics(qwen2_config, torch.device("cpu"), 0.448, seqlens, 0.5, world_size=2)
    assert metrics["perf/mfu/actor"] == pytest.approx(achieved_tflops(qwen2_config, seqlens, 0.5) / 0.448 / 2)
    assert metrics["actor/perf/max_memory_allocated_gb"] == 0.0  # no device memory on the CPU, as verl reads it
    assert metrics["actor/perf/max_memory_reserved_gb"] == 0.0
    assert 0 < metrics["actor/perf/cpu_memory_used_gb"] < 1e5


def test_flops_in_verls_conventions_equal_verls_formula():
    from transformers import Qwen2Config
    from verl.utils.flops_counter import ESTIMATE_FUNC

    config = Qwen2Config(
        vocab_size=1280,
        hidden_size=96,
        intermediate_size=200,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
    )
    seqlens = [30, 17, 5]
    tokens = sum(seqlens)
    ours = flops(config, tokens, 2 * tokens, sum(s * s for s in seqlens))  # verl: embedding + head per token
    assert ours / 1e12 == pytest.approx(ESTIMATE_FUNC["qwen2"](config, tokens, seqlens, 1.0), rel=1e-12)


def test_useful_flops_count_a_shared_prompt_once_and_the_head_on_responses():
    from transformers import Qwen2Config

    config = Qwen2Config(
        vocab_size=1280,
        hidden_size=96,
        intermediate_size=200,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
    )
    groups = [(10, [3, 4]), (6, [2])]
    shared = useful_flops(config, groups, shared=True)
    assert shared == flops(config, 10 + 7 + 6 + 2, 9, 100 + (169 - 100) + (196 - 100) + 64 - 36 + 36)
    assert useful_flops(config, groups, shared=False) == flops(config, 20 + 7 + 6 + 2, 9, 169 + 196 + 64)
    assert useful_flops(copy_with_type(config, "gemma3"), groups, shared=True) is None


def copy_with_type(config, model_type: str):
    import copy

    other = copy.deepcopy(config)
    other.model_type = model_type
    return other
