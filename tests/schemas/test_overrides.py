"""--set: template variables, dotted-path overrides (with list indices or stage names), --drop, and their errors."""

from __future__ import annotations

import pytest
from schema_helpers import BIRD, MINIMAL, load_text, problems_of

from rlflow.check import load_pipeline
from rlflow.errors import ConfigError
from rlflow.schemas.overrides import parse_settings


def test_values_are_read_as_yaml():
    settings, problems = parse_settings(["a=3", "b=true", "c=null", "d=[1, 2]", "e=x: y: z", "f=", "g=1e-3"], "p")
    assert problems == []
    assert [s.value for s in settings] == [3, True, None, [1, 2], "x: y: z", "", 0.001]


def test_malformed_settings():
    _, problems = parse_settings(["novalue", "=3", "1abc=2"], "p")
    assert [p.message for p in problems] == [
        "--set 'novalue': expected name=value",
        "--set '=3': expected name=value",
        "--set '1abc=2': '1abc' is not a valid variable name",
    ]


def test_template_variable_and_paths(project_dir):
    loaded = load_pipeline(
        BIRD,
        [
            "bird_root=/data/bird",
            "stages.0.with.temperature=0.7",
            "trainer.seed=7",
            "trainer.optim.lr=3e-6",
            "algorithm.n=4",
            "description=from the command line",
        ],
        check_paths=False,  # /data/bird is not on this machine
    )
    spec = loaded.spec
    assert spec.data.train == "/data/bird/train.json"
    assert spec.stages[0].with_ == {"temperature": 0.7}
    assert spec.trainer.seed == 7 and spec.trainer.optim.lr == 3e-6 and spec.algorithm.n == 4
    assert spec.description == "from the command line"  # a top-level field, not a template variable
    assert loaded.data["trainer"]["seed"] == 7


def test_a_path_the_file_does_not_hold_yet(project_dir):
    sets = ["trainer.total_epochs=3", "model.dtype=bfloat16", "resources.rw.workers=3", "stages[1].with.timeout_s=2"]
    spec = load_text(project_dir, MINIMAL, sets).spec
    assert spec.trainer.total_epochs == 3 and spec.model.dtype == "bfloat16" and spec.resources["rw"].workers == 3
    assert spec.stages[1].with_ == {"timeout_s": 2}


@pytest.mark.parametrize(
    "setting, expected",
    [
        ("trainer.sedd=3", "4:1: trainer.sedd: --set trainer.sedd=3: unknown key 'sedd' (did you mean 'seed'?)"),
        ("trainr.seed=3", "1:1: trainr.seed: --set trainr.seed=3: unknown key 'trainr' (did you mean 'trainer'?)"),
        ("stages.9.on=pool", "8:1: stages[9].on: --set stages.9.on=pool: index 9 is out of range (stages has 6 items)"),
        (
            "stages.generat.on=pool",
            "8:1: stages.generat.on: --set stages.generat.on=pool: no stage named 'generat' (did you mean 'generate'?)",
        ),
        (
            "stages.zzz=null",
            "8:1: stages: --set stages.zzz=null: no stage named 'zzz' (its stages: generate, reward, "
            "old_log_prob, advantage, update_actor, sync_weights)",
        ),
        (
            "stages.0.with.tempature=1",
            "9:5: stages[0].with.tempature: --set stages.0.with.tempature=1: unknown key "
            "'tempature' for stage kind 'generate' (did you mean 'temperature'?)",
        ),
        (
            "trainer.seed.x=1",
            "4:1: trainer.seed.x: --set trainer.seed.x=1: trainer.seed is a single value, not a "
            "mapping (set it whole: --set trainer.seed=...)",
        ),
        (
            "modle_path=x",
            "1:1: --set modle_path=x: the pipeline has no template variable 'modle_path' "
            "(and no top-level field of that name) (did you mean 'model_path'?)",
        ),
        (
            "zzz=x",
            "1:1: --set zzz=x: the pipeline has no template variable 'zzz' "
            "(and no top-level field of that name) (its variables: bird_root, model_path)",
        ),
    ],
)
def test_bad_paths_are_reported_with_did_you_mean(setting, expected, project_dir):
    problems = problems_of(project_dir, MINIMAL, [setting])
    assert expected in problems, problems


def test_wrong_value_type_is_a_schema_error(project_dir):
    problems = problems_of(project_dir, MINIMAL, ["trainer.train_batch_size=many"])
    assert (
        "4:29: trainer.train_batch_size: --set trainer.train_batch_size=many: expected an integer, got string 'many'"
    ) in problems


def test_values_set_on_the_command_line_are_named_as_such_in_every_error(project_dir):
    sets = ["trainer.seed=x", "model.dtype=float12", "trainer={train_batch_size: 0}"]
    problems = "\n".join(problems_of(project_dir, MINIMAL, sets))
    assert "4:29: trainer.train_batch_size: --set trainer={train_batch_size: 0}: " in problems
    assert "--set model.dtype=float12: " in problems
    assert "--set trainer.seed=x" not in problems, "the later --set of trainer replaced it"
    untouched = problems_of(project_dir, MINIMAL.replace("train_batch_size: 8", "train_batch_size: 0"), [])
    assert untouched and "--set" not in "\n".join(untouched), "an error in the file itself names no --set"


def test_every_bad_setting_is_reported_at_once(project_dir):
    with pytest.raises(ConfigError) as info:
        load_text(project_dir, MINIMAL, ["trainer.sedd=3", "algorithm.m=2", "oops"])
    assert len(info.value.diagnostics) == 3


def test_a_stage_is_addressed_by_its_name(project_dir):
    spec = load_text(project_dir, MINIMAL, ["stages.generate.with.temperature=0.5", "stages.reward.on=pool"]).spec
    assert spec.stages[0].with_ == {"temperature": 0.5} and spec.stages[1].on == "pool"
    problems = problems_of(project_dir, MINIMAL, ["stages.reward.on=nope"])
    assert any(
        p.startswith("10:47: stages[1].on: --set stages.reward.on=nope: unknown resource 'nope'") for p in problems
    )


def test_drop_and_set_null_remove_a_stage_and_later_errors_keep_their_lines(project_dir):
    text = MINIMAL.replace("on: driver}", "on: driver, with: {bogus: 1}}")
    for sets, drops in (
        (["stages.generate.with.temperature=0.5"], ["old_log_prob"]),
        (["stages.old_log_prob=null"], []),
    ):
        problems = _problems_with_drops(project_dir, text, sets, drops)
        # advantage moved from stages[3] to stages[2], update_actor from [4] to [3]; their lines stay 12 and 13
        assert "12:64: stages[2].with.bogus: unknown key 'bogus'" in problems, problems
        assert any(p.startswith("13:5: stages[3]: stage 'update_actor' reads 'old_log_probs'") for p in problems)


def test_a_dropped_stage_that_is_not_there_is_named_with_did_you_mean(project_dir):
    problems = _problems_with_drops(project_dir, MINIMAL, [], ["old_logprob"])
    assert problems == ["8:1: stages: --drop old_logprob: no stage named 'old_logprob' (did you mean 'old_log_prob'?)"]


def test_dropping_the_reference_stage_keeps_the_kl_check_and_says_how_to_turn_kl_off():
    with pytest.raises(ConfigError) as info:
        load_pipeline(BIRD, drops=["ref_log_prob"], check_paths=False)
    kl = next(d for d in info.value.diagnostics if d.path == "algorithm.use_kl_loss")
    assert "no stage computes reference log-probs" in kl.message
    assert kl.fix.endswith("--set algorithm.use_kl_loss=false")
    spec = load_pipeline(BIRD, ["algorithm.use_kl_loss=false"], drops=["ref_log_prob"], check_paths=False).spec
    assert "ref_log_prob" not in [s.name for s in spec.stages]


def _problems_with_drops(folder, text, sets, drops) -> list[str]:
    from rlflow.schemas.project import load_project_config

    path = folder / "p.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, sets, load_project_config(folder), check_paths=False, drops=drops)
    return [str(d).split(":", 1)[1] for d in info.value.diagnostics]
