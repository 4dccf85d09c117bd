"""``algorithm.rollout_correction``: the schema takes exactly the thresholds verl takes, the rollout
must keep its log-probs, and bypass mode needs no old_log_prob stage."""

from __future__ import annotations

import pytest
import torch
from schema_helpers import MINIMAL, load_text, problems_of

from rlflow.schemas.pipeline import ROLLOUT_RS_OPTIONS, RolloutCorrectionSpec

RC = "algorithm.rollout_correction"
SECTIONS = [  # (section, whether verl takes it)
    ({"rollout_is": "token", "rollout_is_threshold": 2.5}, True),
    ({"rollout_is": "sequence", "rollout_is_threshold": "0.5_5.0"}, True),
    ({"rollout_is": "token", "rollout_is_threshold": "3"}, True),
    ({"rollout_is": "token", "rollout_is_threshold": "5.0_0.5"}, False),
    ({"rollout_is": "token", "rollout_is_threshold": -1.0}, False),
    ({"rollout_is": "token", "rollout_is_threshold": "two"}, False),
    ({"rollout_is": "token", "rollout_is_threshold": "0_2"}, False),
    ({"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0"}, True),
    ({"rollout_rs": "token_k1", "rollout_rs_threshold": 2.0}, True),  # k1: a lone upper bound, lower 1/2
    ({"rollout_rs": "seq_mean_k3", "rollout_rs_threshold": 0.01}, True),
    ({"rollout_rs": "seq_mean_k3", "rollout_rs_threshold": "0.1_0.2"}, False),
    ({"rollout_rs": "seq_sum_k1,seq_max_k2", "rollout_rs_threshold": "0.5_2.0,0.3"}, True),
    ({"rollout_rs": "seq_sum_k1,seq_max_k2", "rollout_rs_threshold": "0.5_2.0,0.3,1"}, False),
    ({"rollout_rs": "seq_max_k2,seq_max_k3", "rollout_rs_threshold": 0.3}, True),
    ({"rollout_rs": "seq_max_k1", "rollout_rs_threshold": 0.3}, False),
    ({"rollout_rs": "token_k2"}, False),
    ({"rollout_rs": "token_k1", "rollout_rs_threshold": "2.0_0.5"}, False),
]


def verl_takes(section: dict) -> bool:
    """Whether verl's own helper accepts ``section`` (it parses every threshold on its first batch)."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    log_probs, mask = -torch.rand(2, 3), torch.ones(2, 3)
    keys = ("rollout_is", "rollout_is_threshold", "rollout_rs", "rollout_rs_threshold")
    try:
        compute_rollout_correction_and_rejection_mask(
            log_probs, log_probs - 0.1, mask, **{k: section[k] for k in keys if k in section}
        )
    except (ValueError, TypeError):
        return False
    return True


@pytest.mark.parametrize("section, takes", SECTIONS)
def test_the_schema_takes_what_verl_takes(section, takes):
    from pydantic import ValidationError

    assert verl_takes(section) == takes, "the table above misreads verl"
    try:
        RolloutCorrectionSpec.model_validate(section)
    except ValidationError:
        assert not takes
    else:
        assert takes


def test_the_schema_knows_verls_rejection_options():
    from verl.trainer.ppo.rollout_corr_helper import SUPPORTED_ROLLOUT_RS_OPTIONS

    assert set(ROLLOUT_RS_OPTIONS) == SUPPORTED_ROLLOUT_RS_OPTIONS


def test_a_bad_threshold_is_one_positioned_line(project_dir):
    text = MINIMAL.replace("algorithm: {n: 4}", "algorithm: {n: 4, rollout_correction: {rollout_rs: token_k4}}")
    (problem,) = problems_of(project_dir, text)
    assert "algorithm.rollout_correction.rollout_rs" in problem and "unknown option 'token_k4'" in problem


def test_a_correction_needs_a_rollout_that_keeps_its_log_probs(project_dir):
    hf = MINIMAL.replace(
        "{name: generate, uses: generate, on: pool}", "{name: generate, uses: generate, on: pool, with: {engine: hf}}"
    )
    assert load_text(project_dir, hf).spec  # measuring only: nothing reads them
    (problem,) = problems_of(project_dir, hf, [f"{RC}.rollout_is=token"])
    assert problem.startswith("9:63: stages[0].with.engine:") and "hf generation engine does not keep them" in problem
    assert "set engine: torch" in problem
    assert load_text(project_dir, MINIMAL, [f"{RC}.bypass_mode=true"]).warnings == ()


def test_a_remote_rollout_is_warned_that_it_must_return_them(project_dir):
    from test_rules import REMOTE

    loaded = load_text(
        project_dir,
        REMOTE.replace("on: rw", "on: rw").replace("srv}\n  other", "srv}\n  other"),
        [f"{RC}.rollout_is=sequence"],
    )
    (warning,) = [str(w) for w in loaded.warnings if "rollout_log_probs" in str(w)]
    assert "stages[0].on" in warning and "remote backend behind 'srv' must return rollout_log_probs" in warning


def test_bypass_mode_needs_no_old_log_prob_stage(project_dir):
    without = MINIMAL.replace("  - {name: old_log_prob, uses: old_log_prob, on: pool}\n", "")
    problems = problems_of(project_dir, without)
    assert any("no log_prob stage" in p for p in problems)  # and update_actor's old_log_probs have no producer
    loaded = load_text(project_dir, without, [f"{RC}.bypass_mode=true"])
    assert loaded.spec.algorithm.rollout_correction.bypass_mode


def test_the_verl_order_check_knows_bypass_mode_skips_the_old_log_prob_pass(project_dir):
    from rlflow.check.verl_order import compare_with_verl
    from rlflow.plan.compile import compile_plan

    for sets in ([], [f"{RC}.bypass_mode=true"]):
        spec = load_text(project_dir, MINIMAL, sets).spec
        assert compare_with_verl(spec, compile_plan(spec)).differences == (), sets
    spec = load_text(project_dir, MINIMAL, [f"{RC}.bypass_mode=true"]).spec
    with_pass = compile_plan(load_text(project_dir, MINIMAL).spec)
    (difference,) = compare_with_verl(spec, with_pass).differences  # a plan that kept the pass is not verl's
    assert "old_log_prob" in difference


def test_bypass_mode_keeps_the_configured_loss_and_names_what_it_leaves_unused(project_dir):
    """verl's V1 trainer: bypass mode trains loss_mode against the rollout's log-probs and corrects nothing."""
    assert load_text(project_dir, MINIMAL, [f"{RC}.bypass_mode=true", "algorithm.loss_mode=gspo"]).warnings == ()
    sets = [f"{RC}.bypass_mode=true", "algorithm.loss_mode=gspo", f"{RC}.rollout_rs=seq_mean_k3"]
    loaded = load_text(project_dir, MINIMAL, [*sets, f"{RC}.rollout_rs_threshold=0.01", f"{RC}.loss_type=reinforce"])
    warnings = [str(w) for w in loaded.warnings]
    assert len(warnings) == 2, warnings
    (rs,) = [w for w in warnings if f"{RC}.rollout_rs:" in w]
    assert "rollout_rs has no effect under bypass_mode" in rs and "loss_mode gspo trains against" in rs
    assert "set loss_mode: bypass_mode for verl's legacy bypass loss" in rs
    assert any(f"{RC}.loss_type:" in w for w in warnings)


def test_loss_mode_bypass_mode_is_the_legacy_loss_and_points_to_the_working_key(project_dir):
    (problem,) = problems_of(project_dir, MINIMAL, ["algorithm.loss_mode=bypass_mode"])
    assert "algorithm.loss_mode:" in problem and "set algorithm.rollout_correction.bypass_mode: true" in problem
    loaded = load_text(project_dir, MINIMAL, ["algorithm.loss_mode=bypass_mode", f"{RC}.bypass_mode=true"])
    (warning,) = [str(w) for w in loaded.warnings]
    assert "algorithm.loss_mode:" in warning and "verl's legacy trainer's bypass loss (apply_bypass_mode)" in warning
