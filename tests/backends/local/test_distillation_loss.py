"""rlflow's distillation loss equals verl 0.9.1's functions (verl/trainer/distillation) on the same tensors.

verl's functions read packed model outputs through ``no_padding_2_padding``; here the outputs are already padded
[B, R], so that conversion is replaced by the identity. verl's top-k path takes nested teacher tensors and
student logits over the packed tokens: those are built from the same padded rows.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")

import verl.trainer.distillation.losses as verl_losses  # noqa: E402
import verl.workers.utils.losses as verl_worker_losses  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.trainer.distillation.fsdp import losses as verl_fsdp  # noqa: E402
from verl.workers.config import ActorConfig, DistillationConfig, DistillationLossConfig  # noqa: E402

from rlflow.backends.local import distillation_loss as ours  # noqa: E402
from rlflow.backends.local.logprob import student_topk  # noqa: E402

B, R, V, K = 3, 6, 40, 4
ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
EPS = 1e-6  # where the two sides order a mean or a log-softmax differently


@pytest.fixture(autouse=True)
def padded_outputs(monkeypatch):
    """verl's packed -> padded conversion is the identity on tensors that are padded already."""
    monkeypatch.setattr(verl_losses, "no_padding_2_padding", lambda tensor, data: tensor)
    monkeypatch.setattr(verl_worker_losses, "no_padding_2_padding", lambda tensor, data: tensor)


def actor_config(loss_agg_mode: str = "token-mean") -> ActorConfig:
    return ActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=B,
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=B,
        use_torch_compile=False,
        loss_agg_mode=loss_agg_mode,
    )


def loss_config(**kw) -> DistillationLossConfig:
    base = {"loss_max_clamp": None, "log_prob_min_clamp": None, "use_policy_gradient": False, "topk": K}
    return DistillationLossConfig(**(base | kw))


def rows(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, R, dtype=torch.bool)
    mask[0, 4:] = False
    mask[2, 2:] = False
    logits = torch.randn(B, R, V, generator=g) * 2
    teacher = torch.randn(B, R, V, generator=g) * 2
    responses = torch.randint(0, V, (B, R), generator=g)
    lp = logits.log_softmax(-1).gather(-1, responses[..., None]).squeeze(-1)
    t_all = teacher.log_softmax(-1)
    t_top = t_all.topk(K, dim=-1)
    return {
        "mask": mask,
        "logits": logits,
        "log_prob": lp,
        "old_log_probs": lp + 0.1 * torch.randn(B, R, generator=g),
        "advantages": torch.randn(B, R, generator=g),
        "teacher_logprob": t_all.gather(-1, responses[..., None]) * mask[..., None],
        "teacher_topk": t_top.values * mask[..., None],
        "teacher_ids": t_top.indices * mask[..., None],
    }


def verl_data(t: dict, cfg: ActorConfig, topk: bool) -> TensorDict:
    data = TensorDict(
        {
            "response_mask": t["mask"],
            "old_log_probs": t["old_log_probs"],
            "advantages": t["advantages"],
            "teacher_logprobs": t["teacher_topk"] if topk else t["teacher_logprob"],
            "teacher_ids": t["teacher_ids"],
        },
        batch_size=[B],
    )
    data.set_non_tensor("dp_size", 1)
    data.set_non_tensor("batch_num_tokens", float(t["mask"].sum()))
    data.set_non_tensor("global_batch_size", float(B))
    return data


def verl_topk_outputs(t: dict, cfg: DistillationLossConfig) -> dict[str, torch.Tensor]:
    """verl's fsdp ``compute_forward_kl_topk`` on the rows packed into one sequence (every position kept)."""
    nested = {
        k: torch.nested.as_nested_tensor(list(t[k]), layout=torch.jagged) for k in ("teacher_topk", "teacher_ids")
    }
    out = verl_fsdp.compute_forward_kl_topk(
        student_logits=t["logits"].reshape(1, B * R, V),
        teacher_topk_log_probs=nested["teacher_topk"],
        teacher_topk_ids=nested["teacher_ids"],
        config=DistillationConfig(distillation_loss=cfg),
        data_format="thd",
    )
    return {k: v.view(B, R) for k, v in out.items()}


def our_topk_outputs(t: dict, cfg: DistillationLossConfig) -> dict[str, torch.Tensor]:
    student = student_topk(t["logits"], t["teacher_ids"])
    return ours.forward_kl_topk(student.log_probs, student.ids, t["teacher_topk"], t["teacher_ids"], cfg)


def model_output(t: dict, cfg: DistillationLossConfig) -> dict[str, torch.Tensor]:
    out = {"log_probs": t["log_prob"]}
    if cfg.loss_mode == "forward_kl_topk":
        v = verl_topk_outputs(t, cfg)
        out.update(distillation_losses=v["distillation_losses"], **{k: v[k] for k in v if k != "distillation_losses"})
    return out


def our_losses(t: dict, cfg: DistillationLossConfig):
    if cfg.loss_mode == "forward_kl_topk":
        return ours.topk_losses(our_topk_outputs(t, cfg), t["mask"], cfg.topk)
    return ours.estimator_losses(t["log_prob"], t["teacher_logprob"], t["mask"], cfg.loss_mode)


def value(metric) -> float:
    return float(metric.aggregate() if hasattr(metric, "aggregate") else metric)


@pytest.mark.parametrize("mode", ESTIMATORS)
def test_estimator_losses_equal_verls(mode):
    t, cfg = rows(), loss_config(loss_mode=mode, use_policy_gradient=mode == "k1")
    data = verl_data(t, actor_config(), topk=False)
    expected, metrics = verl_losses.compute_distillation_loss_reverse_kl_estimator(
        actor_config(), DistillationConfig(distillation_loss=cfg), {"log_probs": t["log_prob"]}, data
    )
    got, our_metrics = our_losses(t, cfg)
    assert torch.equal(got, expected)  # the same kl_penalty call
    assert value(our_metrics["distillation/abs_loss"]) == pytest.approx(
        value(metrics["distillation/abs_loss"]), abs=EPS
    )


@pytest.mark.parametrize("clamp", [None, -3.0])
def test_forward_kl_topk_equals_verls(clamp):
    t, cfg = rows(1), loss_config(loss_mode="forward_kl_topk", log_prob_min_clamp=clamp)
    expected, got = verl_topk_outputs(t, cfg), our_topk_outputs(t, cfg)
    for key in ("distillation_losses", "student_mass", "teacher_mass", "overlap_token_advantage"):
        # verl: log_softmax then gather; here: x[ids] - logsumexp(x) (float rounding only)
        torch.testing.assert_close(got[key], expected[key], rtol=EPS, atol=EPS)
    assert torch.equal(got["overlap_count"], expected["overlap_count"])
    # the per-token losses and metrics of verl's registered forward_kl_topk (on verl's own outputs)
    data = verl_data(t, actor_config(), topk=True)
    losses, metrics = verl_losses.compute_forward_kl_topk(
        actor_config(), DistillationConfig(distillation_loss=cfg), model_output(t, cfg), data
    )
    our, our_metrics = ours.topk_losses(expected, t["mask"], K)
    assert torch.equal(our, losses)
    assert set(our_metrics) == set(metrics)
    for key, metric in metrics.items():
        assert value(our_metrics[key]) == pytest.approx(value(metric), abs=EPS), key


CASES = [(m, pg, c) for m in ESTIMATORS for pg in (False, True) for c in (None, 0.5) if pg or m != "k1"]
CASES += [("forward_kl_topk", pg, c) for pg in (False, True) for c in (None, 0.5)]


@pytest.mark.parametrize(("mode", "use_pg", "max_clamp"), CASES)
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_distillation_loss_equals_verls(mode, use_pg, max_clamp, agg):
    t = rows(2)
    cfg = loss_config(loss_mode=mode, use_policy_gradient=use_pg, loss_max_clamp=max_clamp)
    actor = actor_config(agg)
    expected, metrics = verl_losses.distillation_loss(
        actor,
        DistillationConfig(distillation_loss=cfg),
        model_output(t, cfg),
        verl_data(t, actor, mode == "forward_kl_topk"),
    )
    ours_actor, our_cfg = (
        actor_config(agg),
        loss_config(loss_mode=mode, use_policy_gradient=use_pg, loss_max_clamp=max_clamp),
    )
    ours_actor.global_batch_info.update(actor.global_batch_info)  # what the actor sets per mini-batch
    losses, first = (
        ours.topk_losses(verl_topk_outputs(t, our_cfg), t["mask"], K)
        if mode == "forward_kl_topk"
        else our_losses(t, our_cfg)
    )
    got, our_metrics = ours.distillation_loss(
        losses, first, t["mask"], loss_config=our_cfg, actor_config=ours_actor,
        log_prob=t["log_prob"], old_log_prob=t["old_log_probs"],
    )  # fmt: skip
    assert float(got) == pytest.approx(float(expected), abs=EPS) and got.shape == expected.shape
    assert set(our_metrics) == set(metrics)
    assert set(our_metrics) - {"distillation/loss"} <= set(ours.metric_names(our_cfg, ours_actor))
    for key, metric in metrics.items():
        assert value(our_metrics[key]) == pytest.approx(value(metric), abs=EPS), key


@pytest.mark.parametrize("use_task_rewards", [True, False])
@pytest.mark.parametrize("use_pg", [True, False])
def test_distillation_ppo_loss_combination_equals_verls(use_task_rewards, use_pg):
    t = rows(3)
    cfg = loss_config(loss_mode="k3", use_task_rewards=use_task_rewards, use_policy_gradient=use_pg,
                      distillation_loss_coef=0.3)  # fmt: skip
    actor = actor_config()
    data = verl_data(t, actor, topk=False)
    expected, metrics = verl_losses.distillation_ppo_loss(
        actor, DistillationConfig(distillation_loss=cfg), {"log_probs": t["log_prob"]}, data
    )
    # ours: the actor's policy loss (verl's ppo_loss) combined with our distillation term
    policy = verl_worker_losses.ppo_loss(actor_config(), {"log_probs": t["log_prob"]}, verl_data(t, actor, False))[0]
    our_actor = actor_config()
    our_actor.global_batch_info.update(actor.global_batch_info)
    losses, first = our_losses(t, cfg)
    distill, _ = ours.distillation_loss(
        losses, first, t["mask"], loss_config=cfg, actor_config=our_actor,
        log_prob=t["log_prob"], old_log_prob=t["old_log_probs"],
    )  # fmt: skip
    got = ours.distillation_ppo_loss(policy if ours.needs_policy_loss(cfg) else 0.0, distill, cfg)
    assert float(got) == pytest.approx(float(expected), abs=EPS)
    assert float(distill) == pytest.approx(value(metrics["distillation/loss"]), abs=EPS)
    assert ("actor/pg_loss" in metrics) == ours.needs_policy_loss(cfg)


def test_empty_mask_metrics_are_zero():
    t = rows(4)
    t["mask"] = torch.zeros_like(t["mask"])
    losses, metrics = our_losses(t, loss_config(loss_mode="k3"))
    assert all(float(v) == 0.0 for v in {**metrics, **ours.loss_range(losses, t["mask"])}.values())
