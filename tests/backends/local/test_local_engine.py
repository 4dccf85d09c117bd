"""``LocalEngine``: roles, generation, weight sync across pools, and exact checkpoint round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from local_helpers import make_pipeline, without_readings

from rlflow.backends.engine import Engine
from rlflow.backends.local.local_engine import LocalEngine
from rlflow.backends.local.models import build_prompt_batch
from rlflow.backends.local.static_decode import use_static_decode
from rlflow.batch import Batch
from rlflow.errors import BackendError

GEN = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "do_sample": True, "max_response_length": 8, "seed": 3}


def prompts(engine: LocalEngine, n: int = 2) -> Batch:
    return build_prompt_batch(engine.tokenizer, ["How many singers are there?", "SELECT"], 32).repeat_interleave(n)


def one_step(engine: LocalEngine, step: int, rollout: LocalEngine | None = None) -> dict[str, float]:
    """generate -> reward (text rule) -> old log-probs -> GRPO advantage (verl) -> update."""
    from verl.trainer.ppo import core_algos

    batch = prompts(engine)
    batch.update((rollout or engine).generate(batch, {**GEN, "seed": 100 + step}))
    scores = torch.tensor([float(len(text) % 2) for text in batch["response_text"]])
    batch.update(engine.compute_log_prob(batch, {}))
    rewards = torch.zeros(batch["responses"].shape)
    rewards[:, 0] = scores
    adv, _ = core_algos.compute_grpo_outcome_advantage(rewards, batch["response_mask"], np.array([0, 0, 1, 1]))
    batch["advantages"] = adv
    return engine.update_actor(batch, {"global_steps": step})


def test_local_engine_implements_the_engine_interface():
    assert issubclass(LocalEngine, Engine) and not LocalEngine.__abstractmethods__


def test_generate_returns_right_padded_responses_and_decoded_text():
    engine = LocalEngine(make_pipeline())
    out = engine.generate(prompts(engine), GEN)
    assert out["responses"].shape == (4, 8) and out["response_mask"].shape == (4, 8)
    for row, mask, text in zip(out["responses"].tolist(), out["response_mask"].tolist(), out["response_text"]):
        n = sum(mask)
        assert engine.tokenizer.decode(row[:n], skip_special_tokens=True) == text
        assert all(t == engine.tokenizer.pad_token_id for t in row[n:])
    assert out.metrics["rollout/empty_response_ratio"] == 0.0
    again = engine.generate(prompts(engine), GEN)
    assert torch.equal(out["responses"], again["responses"])


def test_hf_generation_engine_and_unknown_engines():
    engine = LocalEngine(make_pipeline())
    greedy = {**GEN, "do_sample": False}
    ours = engine.generate(prompts(engine), greedy)
    hf = engine.generate(prompts(engine), {**greedy, "engine": "hf"})
    assert torch.equal(ours["responses"], hf["responses"]) and ours["response_text"] == hf["response_text"]
    with pytest.raises(BackendError, match="engine 'vllm' is not available.*torch"):
        engine.generate(prompts(engine), {**GEN, "engine": "vllm"})


@pytest.mark.gpu
def test_the_cuda_rollout_decodes_statically_and_agrees_with_the_cpu():
    cpu = LocalEngine(make_pipeline())
    cuda = LocalEngine(make_pipeline(), device="cuda")
    assert use_static_decode(cuda.model) and not use_static_decode(cpu.model)
    greedy = {**GEN, "do_sample": False, "max_response_length": 24}
    ours, theirs = cuda.generate(prompts(cuda), greedy), cpu.generate(prompts(cpu), greedy)
    assert torch.equal(ours["responses"], theirs["responses"])
    assert torch.allclose(ours["rollout_log_probs"], theirs["rollout_log_probs"], atol=1e-3)
    sampled = [cuda.generate(prompts(cuda), {**GEN, "max_response_length": 24}) for _ in range(2)]
    assert torch.equal(sampled[0]["responses"], sampled[1]["responses"])


def test_empty_responses_are_counted():
    engine = LocalEngine(make_pipeline())
    first = engine.generate(prompts(engine), {**GEN, "do_sample": False})["responses"][0, 0].item()
    engine.eos_token_ids = (first,)  # the greedy first token of row 0 now ends the response at once
    out = engine.generate(prompts(engine), {**GEN, "do_sample": False})
    assert out["response_mask"][0].sum() == 1 and out["response_text"][0] == engine.tokenizer.decode([first])
    assert out.metrics["rollout/empty_response_ratio"] >= 1 / 4


def test_reference_exists_only_with_kl_and_starts_equal_to_the_actor():
    plain = LocalEngine(make_pipeline())
    batch = prompts(plain)
    batch.update(plain.generate(batch, GEN))
    with pytest.raises(BackendError, match=r"'ref' role.*uses no KL"):
        plain.compute_ref_log_prob(batch, {})
    kl = LocalEngine(make_pipeline(algorithm={"use_kl_loss": True}))
    old = kl.compute_log_prob(batch, {})["old_log_probs"]
    ref = kl.compute_ref_log_prob(batch, {})["ref_log_prob"]
    assert torch.equal(old, ref)
    kl.update_actor(
        batch.update(
            Batch(
                {"old_log_probs": old, "ref_log_prob": ref, "advantages": torch.ones_like(old) * batch["response_mask"]}
            )
        ),
        {},
    )
    assert torch.equal(kl.compute_ref_log_prob(batch, {})["ref_log_prob"], ref)  # frozen
    assert not torch.equal(kl.compute_log_prob(batch, {})["old_log_probs"], old)


def test_colocated_sync_copies_nothing_and_tracks_the_policy_version():
    engine = LocalEngine(make_pipeline())
    metrics = engine.update_weights(4)
    assert metrics["sync/bytes"] == 0.0 and metrics["sync/seconds"] >= 0.0
    assert engine.generate(prompts(engine), GEN).metrics["rollout/policy_version"] == 4.0


def test_separate_rollout_serves_the_exported_actor_weights():
    pipeline = make_pipeline()
    actor = LocalEngine(pipeline, roles=frozenset({"actor"}))
    rollout = LocalEngine(pipeline, roles=frozenset({"rollout"}))
    one_step(actor, 1, rollout=rollout)
    greedy = {**GEN, "do_sample": False}
    with pytest.raises(BackendError, match="'rollout' role"):
        actor.generate(prompts(actor), greedy)
    state = actor.export_weights()
    metrics = rollout.load_rollout_weights(state, 1)
    assert rollout.global_steps == 1  # the rollout serves the version the weights came with
    assert metrics["sync/bytes"] == sum(t.numel() * t.element_size() for t in state.values()) > 0
    assert "lm_head.weight" not in state  # tied to the embeddings: sent once
    # the rollout now generates exactly what the actor's weights generate
    colocated = LocalEngine(pipeline)
    colocated.load_rollout_weights(state, 1)
    assert torch.equal(
        rollout.generate(prompts(rollout), greedy)["responses"],
        colocated.generate(prompts(colocated), greedy)["responses"],
    )
    with pytest.raises(BackendError, match="do not match"):
        rollout.load_rollout_weights({"bogus.weight": torch.zeros(1)}, 2)
    # one tensor of another shape: refused before anything loads, so the rollout keeps the weights it had
    before = {k: v.clone() for k, v in rollout.model.state_dict().items()}
    bad = {k: torch.zeros_like(v) for k, v in state.items()}
    bad[next(iter(bad))] = torch.zeros(1)
    with pytest.raises(BackendError, match="other shapes"):
        rollout.load_rollout_weights(bad, 2)
    assert all(torch.equal(before[k], v) for k, v in rollout.model.state_dict().items())
    assert rollout.global_steps == 1


def test_checkpoint_round_trip_continues_bit_for_bit(tmp_path):
    pipeline = make_pipeline(trainer={"optim": {"lr": 1e-3, "lr_warmup_steps": 1}})
    first = LocalEngine(pipeline)
    one_step(first, 1)
    info = first.save_checkpoint(str(tmp_path / "step_1"), 1)
    assert info["global_steps"] == 1
    expected_rng = torch.rand(3)
    expected = one_step(first, 2)

    resumed = LocalEngine(pipeline)
    assert resumed.load_checkpoint(str(tmp_path / "step_1"))["global_steps"] == 1
    assert torch.equal(torch.rand(3), expected_rng)
    assert without_readings(one_step(resumed, 2)) == without_readings(expected)
    for a, b in zip(first.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)
    rank = tmp_path / "step_1" / "rank_0"
    assert {p.name for p in rank.iterdir()} == {"model", "trainer.pt", "rng.pt", "meta.json"}
    assert json.loads((rank / "meta.json").read_text())["global_steps"] == 1
    assert (rank / "model" / "model.safetensors").exists() and (rank / "model" / "config.json").exists()


def test_checkpointed_model_directory_is_a_usable_model_path(tmp_path):
    engine = LocalEngine(make_pipeline())
    one_step(engine, 1)
    engine.save_checkpoint(str(tmp_path), 1)
    reloaded = LocalEngine(make_pipeline(model={"path": str(tmp_path / "rank_0" / "model")}))
    for a, b in zip(engine.model.state_dict().values(), reloaded.model.state_dict().values()):
        assert torch.equal(a, b)


def test_an_empty_shard_generates_nothing_with_the_right_width():
    engine = LocalEngine(make_pipeline())
    out = engine.generate(prompts(engine).index([]), GEN)
    assert out["responses"].shape == (0, 8) and out["response_text"] == []


def test_loading_a_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(BackendError, match="rank_0"):
        LocalEngine(make_pipeline()).load_checkpoint(str(tmp_path))


def test_bad_roles_and_devices_are_refused():
    with pytest.raises(BackendError, match="roles"):
        LocalEngine(make_pipeline(), roles=frozenset({"oracle"}))
    with pytest.raises(BackendError, match="roles"):
        LocalEngine(make_pipeline(), roles=frozenset())
    if not torch.cuda.is_available():
        with pytest.raises(BackendError, match="no CUDA device"):
            LocalEngine(make_pipeline(), device="gpu")
