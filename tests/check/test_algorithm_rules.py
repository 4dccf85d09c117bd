"""algorithm: every name verl registers is known (checked against verl's registries), did-you-mean at the
line, the names rlflow's step cannot run refused in one line, and the knobs verl would refuse late."""

from __future__ import annotations

import pytest
from schema_helpers import MINIMAL, load_text, problems_of

from rlflow.schemas.algorithms import ADV_ESTIMATORS, LOSS_MODES, NEEDS


def with_algorithm(text: str) -> str:
    return MINIMAL.replace("algorithm: {n: 4}", f"algorithm: {{n: 4, {text}}}")


def test_the_names_are_verls_registries():
    from verl.trainer.ppo import core_algos

    assert set(ADV_ESTIMATORS) == set(core_algos.ADV_ESTIMATOR_REGISTRY)
    assert set(LOSS_MODES) == set(core_algos.POLICY_LOSS_REGISTRY)
    assert set(NEEDS) <= set(ADV_ESTIMATORS) | set(LOSS_MODES)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("adv_estimator: rlo", "3:34: algorithm.adv_estimator: 'rlo' is not one of gae, grpo"),
        ("loss_mode: gpso", "3:30: algorithm.loss_mode: 'gpso' is not one of vanilla"),
    ],
)
def test_a_misspelt_name_gets_did_you_mean_at_its_line(project_dir, text, expected):
    (problem,) = problems_of(project_dir, with_algorithm(text))
    assert problem.startswith(expected)
    assert problem.endswith("(did you mean 'rloo'?)" if "rlo" in text else "(did you mean 'gspo'?)")


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_a_name_rlflow_cannot_run_is_refused_in_one_line(project_dir, name):
    key = "loss_mode" if name in LOSS_MODES else "adv_estimator"
    (problem,) = problems_of(project_dir, with_algorithm(f"{key}: {name}"))
    assert f"algorithm.{key}: {name} needs" in problem and "\n" not in problem
    assert problem.endswith(f"({NEEDS[name][1]})")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("loss_mode: dro", "loss_mode dro needs algorithm.dro_beta"),
        ("adv_estimator: gdpo", "adv_estimator gdpo needs algorithm.gdpo_reward_keys"),
        ("adv_estimator: gdpo, gdpo_reward_keys: [acc], gdpo_reward_weights: [1, 2]", "2 gdpo_reward_weights for 1"),
        (
            "filter_groups: {enable: true, metric: null}",
            "dynamic sampling (filter_groups.enable) needs filter_groups.metric",
        ),
        ("filter_groups: {enable: true, metric: acc, max_inflight_gen_batches: 0}", "greater than or equal to 1"),
    ],
)
def test_settings_verl_refuses_late_are_refused_now(project_dir, text, expected):
    (problem,) = problems_of(project_dir, with_algorithm(text))
    assert expected in problem


def test_grpo_passk_needs_two_samples(project_dir):
    text = MINIMAL.replace("algorithm: {n: 4}", "algorithm: {n: 1, adv_estimator: grpo_passk}")
    assert any("grpo_passk needs at least 2 samples" in p for p in problems_of(project_dir, text))


def test_norm_by_std_that_the_estimator_ignores_is_a_warning(project_dir):
    loaded = load_text(project_dir, with_algorithm("adv_estimator: rloo, norm_adv_by_std_in_grpo: false"))
    (warning,) = loaded.warnings
    assert warning.path == "algorithm.norm_adv_by_std_in_grpo" and "ignored by adv_estimator rloo" in warning.message
    assert load_text(project_dir, with_algorithm("norm_adv_by_std_in_grpo: false")).warnings == ()  # Dr.GRPO


CRITIC_STAGES = """\
  - {name: values, uses: compute_values, on: pool}
  - {name: update_critic, uses: update_critic, on: pool}
"""


@pytest.mark.parametrize("name", [n for n in ADV_ESTIMATORS if n not in NEEDS and n != "gdpo"])
def test_every_accepted_estimator_validates(project_dir, name):
    text = with_algorithm(f"adv_estimator: {name}") + (CRITIC_STAGES if name == "gae" else "")
    assert load_text(project_dir, text).spec.algorithm.adv_estimator == name


@pytest.mark.parametrize("name", [n for n in LOSS_MODES if n not in NEEDS])
def test_every_accepted_loss_validates(project_dir, name):
    extra = ", dro_beta: 0.1" if name == "dro" else ""
    assert load_text(project_dir, with_algorithm(f"loss_mode: {name}{extra}")).spec.algorithm.loss_mode == name
