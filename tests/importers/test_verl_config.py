"""Reading a verl config with Hydra: verl's shipped config, a user's file, overrides and their errors."""

from __future__ import annotations

import pytest

from rlflow.errors import ConfigError
from rlflow.importers.verl_config import locate, read_verl_config, verl_config_dir


def test_verl_config_dir_is_the_installed_packages():
    folder = verl_config_dir()
    assert (folder / "ppo_trainer.yaml").is_file() and folder.parts[-3:] == ("verl", "trainer", "config")
    assert locate("ppo_trainer") == locate("ppo_trainer.yaml") == folder / "ppo_trainer.yaml"


def test_overrides_compose_as_verl_composes_them():
    overrides = [
        "algorithm.adv_estimator=grpo",
        "data.max_prompt_length=256",
        "trainer.logger=['console','wandb']",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4",
        "~trainer.val_only",
    ]
    cfg = read_verl_config("ppo_trainer", overrides)
    assert cfg.get("algorithm.adv_estimator") == "grpo"
    assert cfg.get("trainer.logger") == ["console", "wandb"]
    assert cfg.get("actor_rollout_ref.rollout.prompt_length") == 256, "interpolations are resolved"
    assert not cfg.has("trainer.val_only"), "~key deletes"
    assert cfg.set_keys == {
        "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space": 4,
        "algorithm.adv_estimator": "grpo",
        "data.max_prompt_length": 256,
        "trainer.logger": ["console", "wandb"],
    }, "a value that only follows an interpolation (rollout.prompt_length) is not one the user set"
    assert cfg.override_keys == {
        "algorithm.adv_estimator",
        "data.max_prompt_length",
        "trainer.logger",
        "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space",
    }


def test_an_override_equal_to_the_default_still_counts_as_set():
    cfg = read_verl_config("ppo_trainer", ["trainer.nnodes=1"])
    assert cfg.set_keys == {"trainer.nnodes": 1}


def test_a_user_file_on_verls_defaults_reports_only_what_it_changes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # its relative search path (verl's own habit) does not exist here
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "mine.yaml").write_text(
        "hydra:\n  searchpath: [file://verl/trainer/config]\n"
        "defaults: [ppo_trainer, _self_]\n"
        "algorithm: {adv_estimator: grpo}\n"
        "data: {max_prompt_length: 300}\n"
        "actor_rollout_ref: {rollout: {n: 4}}\n"
    )
    cfg = read_verl_config(str(tmp_path / "conf" / "mine.yaml"), ["actor_rollout_ref.rollout.n=6"])
    assert cfg.get("actor_rollout_ref.rollout.n") == 6
    assert cfg.set_keys == {
        "actor_rollout_ref.rollout.n": 6,
        "algorithm.adv_estimator": "grpo",
        "data.max_prompt_length": 300,
    }


def test_verls_generated_flat_config_differs_from_the_composed_one_in_nothing():
    assert read_verl_config("_generated_ppo_trainer").set_keys == {}


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            ["trainer.total_epochs"],
            "override 'trainer.total_epochs' is malformed: missing EQUAL at '<EOF>' (write key=value",
        ),
        (["trainer.logger=[console"], "override 'trainer.logger=[console' is malformed: "),
        (
            ["actor_rollout_ref.actor.optim.lrr=1"],
            "override 'actor_rollout_ref.actor.optim.lrr=1': the verl config has no key "
            "'actor_rollout_ref.actor.optim.lrr' (did you mean 'lr'? Or add it with +actor_rollout_ref.actor.optim.lrr=1)",
        ),
        (["data=nothing"], "ppo_trainer.yaml: In 'ppo_trainer': Could not find 'data/nothing'"),
    ],
)
def test_a_malformed_override_is_one_clear_line(overrides, expected):
    with pytest.raises(ConfigError) as info:
        read_verl_config("ppo_trainer", overrides)
    (line,) = str(info.value).splitlines()
    assert line.startswith(expected), line
    assert "Traceback" not in line and "hydra.cc" not in line


def test_every_malformed_override_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        read_verl_config("ppo_trainer", ["a.b", "trainer.nnodes=1", "c=[", "d.e"])
    assert [d.message.split(" is malformed")[0] for d in info.value.diagnostics] == [
        "override 'a.b'",
        "override 'c=['",
        "override 'd.e'",
    ]


def test_every_unknown_key_is_reported_in_one_pass():
    overrides = ["foo.bar=1", "trainer.nnodes=1", "actor_rollout_ref.actor.clip_ratio_hgh=0.3", "trainer.nope=2"]
    with pytest.raises(ConfigError) as info:
        read_verl_config("ppo_trainer", overrides)
    messages = [d.message for d in info.value.diagnostics]
    assert [m.split(":")[0] for m in messages] == [
        "override 'foo.bar=1'",
        "override 'actor_rollout_ref.actor.clip_ratio_hgh=0.3'",
        "override 'trainer.nope=2'",
    ]
    assert "did you mean 'clip_ratio_high'?" in info.value.diagnostics[1].fix


def test_a_config_that_is_not_there_names_the_shipped_ones(tmp_path):
    with pytest.raises(ConfigError) as info:
        read_verl_config(str(tmp_path / "nothere.yaml"))
    assert "no verl config file at" in str(info.value) and "ppo_trainer" in str(info.value)
