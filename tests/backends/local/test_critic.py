"""The critic: its values against a plain forward, its loss against verl's ``compute_value_loss``, how it is
initialised (the policy's body, a seeded head) or loaded (a saved critic as it is), and micro-batching."""

from __future__ import annotations

import copy

import pytest
import torch
from local_helpers import PROMPTS, make_pipeline

from rlflow.backends.local.critic import Critic, load_value_model, token_values
from rlflow.backends.local.local_engine import LocalEngine
from rlflow.backends.local.micro_batches import micro_batch_rows
from rlflow.backends.local.models import build_prompt_batch, load_model
from rlflow.batch import Batch, response_span
from rlflow.schemas.pipeline import Pipeline

CPU = torch.device("cpu")
WIDTH = 8
# response lengths, one a multi-turn transcript with tool tokens (0) between its turns, one empty
MASKS = [[1] * 8, [1] * 3 + [0] * 5, [1] * 5 + [0] * 3, [1, 1, 0, 0, 1, 1, 0, 0], [0] * 8, [1] * 6 + [0] * 2]


def ppo_pipeline(*, critic: dict | None = None, trainer: dict | None = None, algorithm: dict | None = None):
    """``make_pipeline`` with gae, the critic's stages and ``critic`` as its critic block."""
    trainer = {"train_batch_size": 3, "ppo_mini_batch_size": 3, **(trainer or {})}  # the 6 rows of ``rollout``
    base = make_pipeline(algorithm={"adv_estimator": "gae", **(algorithm or {})}, trainer=trainer)
    data = base.model_dump(by_alias=True, mode="json")
    data["critic"] = critic or {}
    data["stages"][2:2] = [{"name": "values", "uses": "compute_values", "on": "pool"}]
    data["stages"].insert(4, {"name": "update_critic", "uses": "update_critic", "on": "pool"})
    return Pipeline.model_validate(data)


def rollout(tokenizer, seed: int = 0) -> Batch:
    """Three prompts x 2 samples: left-padded prompts, right-padded random responses with ``MASKS``."""
    gen = torch.Generator().manual_seed(seed)
    batch = build_prompt_batch(tokenizer, PROMPTS, 32).repeat_interleave(2)
    mask = torch.tensor(MASKS)
    responses = torch.randint(3, 200, (len(MASKS), WIDTH), generator=gen)
    responses[response_span(mask) == 0] = tokenizer.pad_token_id
    batch.update(Batch({"responses": responses, "response_mask": mask}))
    return batch


def with_targets(batch: Batch, model, seed: int = 1) -> Batch:
    """``values`` near the model's own (some past the clip range) and random ``returns``, on the response."""
    gen = torch.Generator().manual_seed(seed)
    mask = batch["response_mask"].float()
    with torch.no_grad():
        own = token_values(model, batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"])
    values = (own + torch.randn(own.shape, generator=gen)) * mask
    returns = torch.randn(own.shape, generator=gen) * mask
    out = Batch(dict(batch.tensors), dict(batch.non_tensors))
    out.update(Batch({"values": values, "returns": returns}))
    return out


def test_the_value_of_a_token_is_the_heads_output_before_it(tokenizer):
    model = load_value_model(ppo_pipeline(), tokenizer, root=None, device=CPU).eval()
    batch = rollout(tokenizer)
    with torch.no_grad():
        values = token_values(model, batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"])
        assert values.shape == (len(MASKS), WIDTH)
        for i, mask in enumerate(batch["response_mask"]):
            prompt = batch["prompts"][i][batch["prompt_mask"][i].bool()]
            span = int(response_span(mask).sum())
            sequence = torch.cat([prompt, batch["responses"][i, :span]])  # unpadded: a plain full forward
            head = model(input_ids=sequence[None]).logits[0, :, 0]
            expected = torch.zeros(WIDTH)
            expected[:span] = head[len(prompt) - 1 : len(prompt) - 1 + span] * mask[:span]
            torch.testing.assert_close(values[i], expected, atol=1e-5, rtol=1e-5)
    off = batch["response_mask"] == 0
    assert torch.all(values[off] == 0) and torch.all(values[~off] != 0)


def test_the_values_do_not_depend_on_the_micro_batches(tokenizer):
    critic = Critic(load_value_model(ppo_pipeline(), tokenizer, root=None, device=CPU), ppo_pipeline())
    batch = rollout(tokenizer)
    whole = critic.values(batch, None)
    for micro in (1, 4):
        torch.testing.assert_close(critic.values(batch, micro), whole, atol=1e-6, rtol=1e-5)


LOSS_AGG_MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@pytest.mark.parametrize("micro", [6, 2])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_the_loss_is_verls_compute_value_loss_over_the_mini_batch(tokenizer, mode, micro):
    """One mini-batch of the 6 rows (3 prompts x n 2), cut into ``micro``-row micro-batches: the reported loss
    and clip fraction are verl's on the critic's values before the step, normalised as verl's trainer does
    (batch_num_tokens: the mini-batch's, global_batch_size: ppo_mini_batch_size x n); so is the gradient."""
    from verl.trainer.ppo.core_algos import compute_value_loss

    spec = ppo_pipeline(
        critic={"loss_agg_mode": mode, "cliprange_value": 0.2, "ppo_micro_batch_size_per_gpu": micro},
    )
    model = load_value_model(spec, tokenizer, root=None, device=CPU)
    batch = with_targets(rollout(tokenizer), model)
    reference = copy.deepcopy(model).train()
    mask = batch["response_mask"].bool()
    scale = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": 6}
    loss, clipfracs, vpreds = 0.0, [], []
    for rows in micro_batch_rows(batch, micro_batch_size=micro):
        part = batch.index(rows)
        vpred = token_values(reference, part["prompts"], part["prompt_mask"], part["responses"], part["response_mask"])
        part_loss, clipfrac = compute_value_loss(
            vpreds=vpred,
            returns=part["returns"],
            values=part["values"],
            response_mask=part["response_mask"].bool(),
            cliprange_value=0.2,
            loss_agg_mode=mode,
            **scale,
        )
        part_loss.backward()
        loss += part_loss.item()
        clipfracs.append(clipfrac.item())
        vpreds.append(vpred.detach())
    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in reference.parameters() if p.grad is not None])
    assert 0 < sum(clipfracs) and max(clipfracs) < 1  # the clip is exercised, not everywhere

    metrics = Critic(model, spec).update(batch, step=1)
    assert metrics["critic/vf_loss"] == pytest.approx(loss, rel=1e-5)
    assert metrics["critic/vf_clipfrac"] == pytest.approx(sum(clipfracs) / len(clipfracs), rel=1e-6)
    assert metrics["critic/grad_norm"] == pytest.approx(grad_norm.item(), rel=1e-4)
    vpred = torch.cat(vpreds)
    assert metrics["critic/vpred_mean"] == pytest.approx(
        sum((v * m).sum() / m.sum().clamp(min=1) for v, m in zip(vpreds, mask.split(micro))).item() / len(vpreds),
        rel=1e-5,
    )
    if micro < 6:  # the global-batch normalisation: micro-batches add up to the whole mini-batch's loss
        whole, _ = compute_value_loss(vpred, batch["returns"], batch["values"], mask, 0.2, loss_agg_mode=mode, **scale)
        assert loss == pytest.approx(whole.item(), rel=1e-5)


def test_the_update_moves_the_values_toward_the_returns(tokenizer):
    spec = ppo_pipeline(critic={"optim": {"lr": 1e-5}, "cliprange_value": 10.0})
    critic = Critic(load_value_model(spec, tokenizer, root=None, device=CPU), spec)
    batch = with_targets(rollout(tokenizer), critic.model)
    mask = batch["response_mask"].bool()
    before = ((critic.values(batch, None) - batch["returns"])[mask] ** 2).mean()
    losses = [critic.update(batch, step=s)["critic/vf_loss"] for s in range(1, 4)]
    after = ((critic.values(batch, None) - batch["returns"])[mask] ** 2).mean()
    assert after < before and losses[-1] < losses[0]
    assert losses[0] == pytest.approx(0.5 * before.item(), rel=1e-4)  # token-mean: half the squared error


def test_a_fresh_critic_is_the_policys_body_with_a_seeded_head(tokenizer):
    spec = ppo_pipeline()
    critic = load_value_model(spec, tokenizer, root=None, device=CPU)
    policy = load_model(spec.model, tokenizer, seed=spec.trainer.seed, root=None, device="cpu")
    prefix = critic.base_model_prefix
    body, policy_body = critic.get_submodule(prefix).state_dict(), policy.get_submodule(prefix).state_dict()
    assert body.keys() == policy_body.keys() and all(torch.equal(body[k], policy_body[k]) for k in body)
    assert type(critic).__name__.endswith("ForTokenClassification") and critic.config.num_labels == 1
    head = dict(critic.named_parameters())
    head = {k: v for k, v in head.items() if not k.startswith(f"{prefix}.")}
    assert head and any(v.abs().sum() > 0 for v in head.values())  # a drawn head (its bias starts at 0)

    torch.manual_seed(1234)  # the global RNG does not reach the head: the seed alone decides it
    again = dict(load_value_model(spec, tokenizer, root=None, device=CPU).named_parameters())
    assert all(torch.equal(again[k], v) for k, v in head.items())
    other = ppo_pipeline(trainer={"seed": spec.trainer.seed + 1})
    reseeded = dict(load_value_model(other, tokenizer, root=None, device=CPU).named_parameters())
    assert not all(torch.equal(reseeded[k], v) for k, v in head.items())


def test_a_saved_critic_loads_as_it_is(tokenizer, tmp_path):
    """A checkpoint's ``critic/`` model directory, and one transformers saved, as ``critic.model.path``."""
    spec = ppo_pipeline(critic={"optim": {"lr": 1e-2}})
    engine = LocalEngine(spec, roles=frozenset({"critic"}))
    batch = with_targets(rollout(tokenizer), engine.critic.model)
    engine.update_critic(batch, {"global_steps": 1})
    engine.save_checkpoint(str(tmp_path / "ckpt"), 1)
    engine.critic.model.save_pretrained(tmp_path / "saved")
    engine.tokenizer.save_pretrained(tmp_path / "saved")
    trained = engine.critic.model.state_dict()
    for path in (tmp_path / "ckpt" / "critic" / "rank_0" / "model", tmp_path / "saved"):
        other_seed = ppo_pipeline(critic={"model": {"path": str(path)}}, trainer={"seed": 99})
        loaded = load_value_model(other_seed, tokenizer, root=None, device=CPU).state_dict()
        assert loaded.keys() == trained.keys() and all(torch.equal(loaded[k], trained[k]) for k in trained), path


def test_the_critic_engine_round_trips_through_a_checkpoint(tokenizer, tmp_path):
    spec = ppo_pipeline(critic={"optim": {"lr": 1e-2}})
    first = LocalEngine(spec, roles=frozenset({"critic"}))
    batch = with_targets(rollout(tokenizer), first.critic.model)
    first.update_critic(batch, {"global_steps": 1})
    first.save_checkpoint(str(tmp_path), 1)
    assert (tmp_path / "critic" / "rank_0" / "trainer.pt").is_file() and not (tmp_path / "rank_0").exists()
    second = LocalEngine(ppo_pipeline(critic={"optim": {"lr": 1e-2}}), roles=frozenset({"critic"}))
    assert second.load_checkpoint(str(tmp_path))["global_steps"] == 1
    assert torch.equal(first.compute_values(batch, {})["values"], second.compute_values(batch, {})["values"])
    assert first.update_critic(batch, {"global_steps": 2}) == second.update_critic(batch, {"global_steps": 2})
