"""Stage ``generate``: n interleaved samples per prompt, responses from the engine, seeded per step."""

from __future__ import annotations

import pytest
import torch
from stage_helpers import data_batch, make_pipeline, run_stage

from rlflow.errors import BackendError
from rlflow.stages.generate import generation_seed


def test_expands_each_prompt_into_n_interleaved_rows(engine):
    pipeline = make_pipeline()
    batch = data_batch(engine.tokenizer)
    out = run_stage(pipeline, engine, "generate", batch)
    assert len(out) == 6
    assert out["uid"] == ["s1-p0", "s1-p0", "s1-p1", "s1-p1", "s1-p2", "s1-p2"]
    assert out["raw_prompt"][2] == batch["raw_prompt"][1] and out["reward_info"][5] == batch["reward_info"][2]
    assert torch.equal(out["prompts"], batch["prompts"].repeat_interleave(2, dim=0))
    assert out["responses"].shape == (6, 8) and out["response_mask"].shape == (6, 8)
    assert len(out["response_text"]) == 6 and 0.0 <= out.metrics["rollout/empty_response_ratio"] <= 1.0


def test_samples_are_seeded_by_step_and_rank(engine):
    pipeline = make_pipeline()
    batch = data_batch(engine.tokenizer)
    first = run_stage(pipeline, engine, "generate", batch, step=3)["responses"]
    again = run_stage(pipeline, engine, "generate", batch, step=3)["responses"]
    other = run_stage(pipeline, engine, "generate", batch, step=4)["responses"]
    assert torch.equal(first, again) and not torch.equal(first, other)
    seeds = {generation_seed(7, step, rank) for step in range(50) for rank in range(8)}
    assert len(seeds) == 400 and all(0 <= s < 2**63 for s in seeds)
    assert generation_seed(7, -1, 0) >= 0  # validation batches use step -1


def test_config_n_overrides_the_algorithm_and_greedy_rows_agree(engine):
    pipeline = make_pipeline()
    out = run_stage(pipeline, engine, "generate", data_batch(engine.tokenizer), config={"n": 3, "do_sample": False})
    assert len(out) == 9
    assert torch.equal(out["responses"][0], out["responses"][1]) and torch.equal(
        out["responses"][1], out["responses"][2]
    )


def test_hf_engine_through_the_stage_matches_torch_when_greedy(engine):
    pipeline = make_pipeline()
    batch = data_batch(engine.tokenizer)
    ours = run_stage(pipeline, engine, "generate", batch, config={"do_sample": False, "n": 1})
    hf = run_stage(pipeline, engine, "generate", batch, config={"do_sample": False, "n": 1, "engine": "hf"})
    assert torch.equal(ours["responses"], hf["responses"])


def test_vllm_is_refused_with_what_to_use_instead(engine):
    # a plain LocalEngine has no vLLM (create_local_engine builds one that has, when the pipeline asks)
    with pytest.raises(BackendError, match=r"engine 'vllm' is not available in the local backend.*torch"):
        run_stage(make_pipeline(), engine, "generate", data_batch(engine.tokenizer), config={"engine": "vllm"})


def test_max_num_seqs_bounds_the_rows_decoded_at_once(engine, monkeypatch):
    from rlflow.backends.local import generation

    calls = []
    real = generation.sample_with_log_probs

    def counting(model, prompts, mask, params, **kw):
        calls.append(prompts.shape[0])
        return real(model, prompts, mask, params, **kw)

    monkeypatch.setattr(generation, "sample_with_log_probs", counting)
    pipeline, batch = make_pipeline(), data_batch(engine.tokenizer)
    greedy = {"do_sample": False, "n": 2}
    whole = run_stage(pipeline, engine, "generate", batch, config=greedy)
    assert calls == [6]  # under the CPU's default cap: one call
    calls.clear()
    chunked = run_stage(pipeline, engine, "generate", batch, config={**greedy, "max_num_seqs": 4})
    assert calls == [4, 2] and torch.equal(whole["responses"], chunked["responses"])
    assert whole["response_text"] == chunked["response_text"]
