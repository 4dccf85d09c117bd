"""Rules for ``algorithm``: the estimator and loss run in rlflow's step, their knobs, DAPO's dynamic sampling.

A registered name whose step needs a part rlflow does not run is refused in one line; a knob nothing reads is
a warning. Design notes: docs/design/check.md.
"""

from __future__ import annotations

from rlflow.schemas.algorithms import NEEDS, READS_NORM_BY_STD
from rlflow.schemas.subject import Reporter, Subject


def check_algorithm(subject: Subject, report: Reporter) -> None:
    algo = subject.algorithm
    if algo is None:
        return
    for key in ("adv_estimator", "loss_mode"):
        name = getattr(algo, key)
        if name in NEEDS and not (name == "bypass_mode" and algo.rollout_correction.bypass_mode):
            message, fix = NEEDS[name]
            report(("algorithm", key), message, fix)
    check_bypass_mode(algo, report)
    if algo.loss_mode == "dro" and algo.dro_beta is None:
        report(
            ("algorithm", "loss_mode"),
            "loss_mode dro needs algorithm.dro_beta (verl refuses it unset)",
            "set dro_beta: 0.1",
        )
    if algo.adv_estimator == "grpo_passk" and algo.n < 2:
        report(("algorithm", "n"), "adv_estimator grpo_passk needs at least 2 samples per prompt", "set n: 2 or more")
    if not algo.norm_adv_by_std_in_grpo and algo.adv_estimator not in READS_NORM_BY_STD:
        report.warn(
            ("algorithm", "norm_adv_by_std_in_grpo"),
            f"norm_adv_by_std_in_grpo: false is ignored by adv_estimator {algo.adv_estimator} "
            "(verl's trainer gives it to grpo and grpo_passk only)",
            "use adv_estimator: grpo for Dr.GRPO's unscaled advantages",
        )
    keys, weights = algo.gdpo_reward_keys, algo.gdpo_reward_weights
    if algo.adv_estimator == "gdpo" and not keys:
        report(
            ("algorithm", "adv_estimator"),
            "adv_estimator gdpo needs algorithm.gdpo_reward_keys: the reward function's keys it normalises one "
            "by one (verl refuses it unset)",
            "set gdpo_reward_keys: [acc, format_ok] (keys your reward function returns)",
        )
    if algo.adv_estimator == "gdpo" and weights is not None and len(weights) != len(keys or ()):
        report(
            ("algorithm", "gdpo_reward_weights"),
            f"{len(weights)} gdpo_reward_weights for {len(keys or ())} gdpo_reward_keys",
            "give one weight per key, or leave the weights out (equal weights)",
        )
    groups = algo.filter_groups
    if groups.enable and not groups.metric:
        report(
            ("algorithm", "filter_groups", "enable"),
            "dynamic sampling (filter_groups.enable) needs filter_groups.metric: the value whose spread decides "
            "which groups to keep",
            "set metric: reward (the score), or a key your reward function returns, such as acc",
        )


def check_bypass_mode(algo, report: Reporter) -> None:
    """Bypass mode as verl's V1 trainer runs it: the configured loss against the rollout's log-probs.

    V1 corrects nothing there (no importance weights, no rejection: ``rollout_is``, ``rollout_rs``
    and ``loss_type`` are inert, a warning each). verl's legacy trainer (``apply_bypass_mode``)
    instead swapped the loss for its ``bypass_mode`` loss, which applies them; rlflow keeps that
    behaviour under its name, ``loss_mode: bypass_mode``, and warns that it is the legacy one.
    """
    rc = algo.rollout_correction
    if not rc.bypass_mode:
        return
    if algo.loss_mode == "bypass_mode":
        report.warn(
            ("algorithm", "loss_mode"),
            "loss_mode bypass_mode is verl's legacy trainer's bypass loss (apply_bypass_mode): PPO clip or "
            "REINFORCE (rollout_correction.loss_type) against the rollout's log-probs, rollout_is and rollout_rs "
            "applied inside; verl's V1 trainer keeps the configured loss in bypass mode and corrects nothing",
            "keep it for the legacy loss, or set loss_mode: vanilla (or another loss) for V1's",
        )
        return
    inert = [key for key in ("rollout_is", "rollout_rs") if getattr(rc, key) is not None]
    inert += ["loss_type"] if rc.loss_type != "ppo_clip" else []
    for key in inert:
        report.warn(
            ("algorithm", "rollout_correction", key),
            f"{key} has no effect under bypass_mode: verl's V1 trainer corrects nothing in bypass mode, "
            f"loss_mode {algo.loss_mode} trains against the rollout's log-probs as they are",
            "set loss_mode: bypass_mode for verl's legacy bypass loss, which applies it, or bypass_mode: false "
            "for the decoupled correction",
        )
