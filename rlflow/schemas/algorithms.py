"""The GRPO family by verl's names: every advantage estimator and policy loss verl 0.9.1 registers.

Kept as ``Literal`` types, so a misspelt name gets a did-you-mean without importing verl; ``NEEDS`` says what a
name needs beyond rlflow's step. Pure. Design notes: docs/design/schemas.md.
"""

from __future__ import annotations

from typing import Literal, get_args

AdvEstimator = Literal[
    "gae",
    "grpo",
    "grpo_vectorized",
    "gdpo",
    "grpo_passk",
    "reinforce_plus_plus_baseline",
    "rloo",
    "opo",
    "reinforce_plus_plus",
    "remax",
    "gpg",
    "rloo_vectorized",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
]
LossMode = Literal[
    "vanilla",
    "dppo_tv",
    "dppo_kl",
    "gspo",
    "sapo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "dro",
    "cispo",
    "bypass_mode",
]
ADV_ESTIMATORS: tuple[str, ...] = get_args(AdvEstimator)
LOSS_MODES: tuple[str, ...] = get_args(LossMode)

# Registered names whose step needs a part rlflow does not run: what is missing, and what to use instead.
NEEDS: dict[str, tuple[str, str]] = {
    "remax": (
        "remax needs a greedy baseline rollout scored by the reward (verl's reward_baselines) in every step, "
        "which rlflow's step does not run",
        "use rloo or grpo, whose baseline is the group's other samples",
    ),
    "optimal_token_baseline": (
        "optimal_token_baseline needs sum_pi_squared from the actor's log-prob pass "
        "(verl: actor.calculate_sum_pi_squared), which rlflow's log-prob stages do not compute",
        "use grpo or rloo",
    ),
    "tir_optimal_token_baseline": (
        "tir_optimal_token_baseline needs sum_pi_squared from the actor's log-prob pass "
        "(verl: actor.calculate_sum_pi_squared), which rlflow's log-prob stages do not compute",
        "use grpo or rloo",
    ),
    "bypass_mode": (
        "bypass_mode needs algorithm.rollout_correction.bypass_mode: true (its old policy is the rollout's "
        "own log-probs; without bypass mode the old_log_prob stage's are)",
        "set algorithm.rollout_correction.bypass_mode: true, with loss_mode: vanilla (or another loss) for "
        "verl's V1 bypass, or with this loss for verl's legacy one",
    ),
}

# Estimators that read algorithm.norm_adv_by_std_in_grpo as verl's trainer calls them (verl's
# compute_advantage hands it to grpo; grpo_passk reads it from the config; the others never see it).
READS_NORM_BY_STD = frozenset({"grpo", "grpo_passk"})
