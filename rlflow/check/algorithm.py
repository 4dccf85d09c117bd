"""Rules for ``algorithm``: the estimator and loss run in rlflow's step, their knobs, DAPO's dynamic sampling.

The schema already knows every name verl registers (``rlflow.schemas.algorithms``: a misspelt
name gets its did-you-mean there). These rules refuse, in one line each, the registered names
whose step needs a part rlflow does not run (a critic, REMAX's greedy baseline rollout, the
actor's sum of squared probabilities, the rollout's own log-probs), and the settings verl would
refuse only once training started (``dro`` without ``dro_beta``, ``gdpo`` without its reward keys, dynamic sampling without a
metric). A knob the chosen estimator never reads is a warning, as verl would silently ignore it.
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
        if name in NEEDS:
            message, fix = NEEDS[name]
            report(("algorithm", key), message, fix)
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
