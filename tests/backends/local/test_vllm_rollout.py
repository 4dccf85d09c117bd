"""The vLLM rollout engine, for real, on vLLM's CPU build (opt-in).

vLLM needs a transformers release that verl 0.9.1 does not accept, so this test runs in its
own virtual environment and is skipped unless ``RLFLOW_TEST_VLLM=1``::

    bash scripts/setup_vllm_cpu_venv.sh
    RLFLOW_TEST_VLLM=1 .venv-vllm/bin/python -m pytest tests/backends/local/test_vllm_rollout.py

It builds the local engine with ``generate.with.engine: vllm`` on the built-in tiny model
(saved to a temporary Hugging Face directory for vLLM) and checks, with greedy decoding:
vLLM's tokens equal the torch rollout's for the same weights; weights pushed after an update
(colocated: ``update_weights``) and from another pool (``load_rollout_weights``) change
vLLM's output to the torch rollout's output for the new weights, with ``sync/bytes`` equal to
the bytes pushed. The weights are "sharpened" first (see conftest): a fresh model's logits
are nearly flat and its greedy output is one repeated token, which would make agreement
vacuous.
"""

from __future__ import annotations

import os

import pytest
import torch
from local_helpers import PROMPTS, make_pipeline, sharpen

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        os.environ.get("RLFLOW_TEST_VLLM") != "1",
        reason="opt-in: RLFLOW_TEST_VLLM=1 with .venv-vllm (scripts/setup_vllm_cpu_venv.sh)",
    ),
]

GREEDY = {"do_sample": False, "temperature": 0.0, "max_response_length": 8}


@pytest.fixture(scope="module")
def engine():
    pytest.importorskip("vllm")
    from rlflow.backends.local.factory import create_local_engine
    from rlflow.check.engines import engine_choice

    pipeline = make_pipeline(generate={"engine": "vllm"})
    eng = create_local_engine(pipeline, engine_choice(pipeline), device="cpu", roles=frozenset({"rollout"}))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def prompts(engine):
    from rlflow.backends.local.models import build_prompt_batch

    return build_prompt_batch(engine.tokenizer, PROMPTS, 32)


def _tokens(engine, prompts, rollout: str, **params):
    out = engine.generate(prompts, {**GREEDY, **params, "engine": rollout})
    return out["responses"], out["response_mask"]


def _weight_bytes(state: dict) -> float:
    """Bytes of the distinct tensors (a tied weight once)."""
    return float(sum({t.data_ptr(): t.numel() * t.element_size() for t in state.values()}.values()))


def test_engine_is_the_vllm_rollout(engine):
    from rlflow.backends.local.vllm_rollout import VllmRollout, sleep_mode_available

    assert isinstance(engine.vllm, VllmRollout)
    assert not sleep_mode_available() and not engine.vllm.sleep_mode  # vLLM's CPU platform has no sleep mode


def test_colocated_sync_matches_torch_greedy(engine, prompts):
    sharpen(engine.model, seed=0)
    metrics = engine.update_weights(1)
    assert metrics["sync/bytes"] == _weight_bytes(engine.model.state_dict()) > 0
    assert metrics["sync/seconds"] > 0
    vllm_tokens, vllm_mask = _tokens(engine, prompts, "vllm")
    torch_tokens, torch_mask = _tokens(engine, prompts, "torch")
    assert vllm_tokens.shape == (len(PROMPTS), 8)
    assert torch.equal(vllm_tokens, torch_tokens) and torch.equal(vllm_mask, torch_mask)
    assert len(set(vllm_tokens[0].tolist())) > 1  # a real sequence, not one repeated token


def test_pushed_weights_change_vllm_output(engine, prompts):
    from rlflow.backends.local.models import load_model

    before, _ = _tokens(engine, prompts, "vllm")
    other = sharpen(load_model(engine.pipeline.model, engine.tokenizer, seed=2), seed=7)
    state = {k: v for k, v in other.state_dict().items() if k != "lm_head.weight"}  # tied, as export_weights sends
    metrics = engine.load_rollout_weights(state, 1)
    assert metrics["sync/bytes"] == _weight_bytes(engine.model.state_dict()) == _weight_bytes(state)
    after, after_mask = _tokens(engine, prompts, "vllm")
    assert not torch.equal(before, after)
    torch_tokens, torch_mask = _tokens(engine, prompts, "torch")
    assert torch.equal(after, torch_tokens) and torch.equal(after_mask, torch_mask)


def test_sampling_is_seeded(engine, prompts):
    params = {"do_sample": True, "temperature": 1.0, "top_p": 0.9, "top_k": 50, "seed": 3}
    first, mask = _tokens(engine, prompts, "vllm", **params)
    again, _ = _tokens(engine, prompts, "vllm", **params)
    other, _ = _tokens(engine, prompts, "vllm", **{**params, "seed": 4})
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert int(first.max()) < engine.model.config.vocab_size and bool(mask[:, 0].all())


def test_generate_reports_rollout_metrics_and_takes_empty_shards(engine, prompts):
    out = engine.generate(prompts, {**GREEDY, "engine": "vllm"})
    assert out.metrics["rollout/policy_version"] == 1.0
    assert 0.0 <= out.metrics["rollout/empty_response_ratio"] <= 1.0
    assert len(out["response_text"]) == len(PROMPTS)
    empty = engine.generate(prompts.index([]), {**GREEDY, "engine": "vllm"})
    assert empty["responses"].shape == (0, 8) and empty["response_text"] == []


def test_a_large_seeded_batch_samples_whole(engine):
    """More prompt tokens than vLLM's default step budget: the CPU worker must not chunk a seeded prefill."""
    from rlflow.backends.local.generation import SamplingParams
    from rlflow.backends.local.models import build_prompt_batch
    from rlflow.backends.local.vllm_rollout import VllmRollout

    long_prompts = [
        ("SELECT name FROM singer WHERE age > 30 AND country = 'France'; " * 14)[:800] + f" #{i}" for i in range(96)
    ]
    batch = build_prompt_batch(engine.tokenizer, long_prompts, 1024)
    assert int(batch["prompt_mask"].sum()) > 16384
    rollout = VllmRollout.from_model(engine.model, engine.tokenizer, max_model_len=1100, device="cpu")
    try:
        params = SamplingParams(
            max_new_tokens=4,
            eos_token_ids=(engine.tokenizer.eos_token_id,),
            pad_token_id=engine.tokenizer.pad_token_id,
            temperature=1.0,
            seed=5,
        )
        responses, mask = rollout.generate(batch["prompts"], batch["prompt_mask"], params)
        again, _ = rollout.generate(batch["prompts"], batch["prompt_mask"], params)
    finally:
        rollout.close()
    assert responses.shape == (96, 4) and bool(mask[:, 0].all())
    assert torch.equal(responses, again)  # seeded rows sample the same tokens
