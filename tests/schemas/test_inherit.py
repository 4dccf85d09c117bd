"""``base:``: a pipeline built on another one (merge rules, nesting, templates, positions, errors)."""

from __future__ import annotations

import pytest
import yaml
from schema_helpers import MINIMAL, REPO, load_text

from rlflow.check import load_pipeline
from rlflow.errors import ConfigError


def _load(folder, text, sets=(), **bases):
    for name, body in bases.items():
        (folder / f"{name}.yaml").write_text(body, encoding="utf-8")
    return load_text(folder, text, sets, name="derived.yaml")


def _problems(folder, text, sets=(), **bases) -> list[str]:
    with pytest.raises(ConfigError) as info:
        _load(folder, text, sets, **bases)
    return [str(d).replace(f"{folder}/", "") for d in info.value.diagnostics]


def _stages(spec) -> list[tuple[str, str]]:
    return [(s.name, s.on) for s in spec.stages]


def test_mappings_merge_lists_and_scalars_replace_null_removes(project_dir):
    spec = _load(
        project_dir,
        """\
base: base.yaml
name: small
trainer: {total_steps: 3, optim: {betas: [0.8, 0.9]}}
resources:
  rw: null
  rw2: {type: cpu, workers: 2}
""",
        base=MINIMAL.replace(
            "ppo_mini_batch_size: 4}", "ppo_mini_batch_size: 4, optim: {betas: [0.9, 0.99, 1]}}"
        ).replace("on: rw}", "on: rw2}"),
    ).spec
    assert spec.name == "small"
    assert (spec.trainer.train_batch_size, spec.trainer.ppo_mini_batch_size, spec.trainer.total_steps) == (8, 4, 3)
    assert spec.trainer.optim.betas == (0.8, 0.9)
    assert list(spec.resources) == ["pool", "rw2"] and spec.resources["rw2"].workers == 2


def test_stages_patched_by_name_keep_their_order(project_dir):
    spec = _load(
        project_dir,
        """\
base: base.yaml
resources: {pool2: {type: local, device: cpu}}
stages:
  generate: {on: pool2, with: {temperature: 0.5}}
  old_log_prob: {on: pool2}
  update_actor: {on: pool2}
  sync_weights: {on: pool2}
""",
        base=MINIMAL.replace("uses: generate, on: pool}", "uses: generate, on: pool, with: {top_p: 0.9}}"),
    ).spec
    assert _stages(spec) == [
        ("generate", "pool2"),
        ("reward", "rw"),
        ("old_log_prob", "pool2"),
        ("advantage", "driver"),
        ("update_actor", "pool2"),
        ("sync_weights", "pool2"),
    ]
    assert spec.stages[0].with_ == {"top_p": 0.9, "temperature": 0.5}


def test_a_stage_patched_with_null_is_removed_and_a_list_replaces_the_stages(project_dir):
    base = MINIMAL + "  - {name: save, uses: save_checkpoint, on: pool}\n"
    assert [n for n, _ in _stages(_load(project_dir, "base: base.yaml\nstages: {save: null}\n", base=base).spec)] == [
        "generate",
        "reward",
        "old_log_prob",
        "advantage",
        "update_actor",
        "sync_weights",
    ]
    stages = MINIMAL[MINIMAL.index("stages:") :].replace("on: rw}", "on: driver}")
    assert _stages(_load(project_dir, "base: base.yaml\n" + stages, base=base).spec)[1] == ("reward", "driver")
    middle = MINIMAL.replace("on: rw}\n", "on: rw}\n  - {name: save, uses: save_checkpoint, on: pool}\n")
    problems = _problems(
        project_dir, "base: base.yaml\nstages: {save: null}\n", base=middle.replace("on: driver", "on: drivr")
    )
    assert any(p.startswith("base.yaml:13:") and "stages[3].on: unknown resource 'drivr'" in p for p in problems)


def test_a_stage_dropped_on_the_command_line_leaves_the_base_and_later_errors_stay_in_the_base(project_dir):
    middle = MINIMAL.replace("on: rw}\n", "on: rw}\n  - {name: save, uses: save_checkpoint, on: pool}\n")
    spec = _load(project_dir, "base: base.yaml\n", ["stages.save=null"], base=middle).spec
    assert "save" not in [n for n, _ in _stages(spec)]
    problems = _problems(
        project_dir, "base: base.yaml\n", ["stages.save=null"], base=middle.replace("on: driver", "on: drivr")
    )
    assert any(p.startswith("base.yaml:13:") and "stages[3].on: unknown resource 'drivr'" in p for p in problems)


def test_bases_nest_relative_to_the_file_that_names_them(project_dir):
    (project_dir / "sub").mkdir()
    (project_dir / "sub" / "middle.yaml").write_text("base: ../root.yaml\nname: middle\ntrainer: {total_steps: 5}\n")
    spec = _load(
        project_dir, "base: sub/middle.yaml\nname: top\nstages: {generate: {with: {temperature: 0.5}}}\n", root=MINIMAL
    ).spec
    assert (spec.name, spec.trainer.total_steps, spec.stages[0].with_) == ("top", 5, {"temperature": 0.5})


def test_bases_share_the_template_variables_and_set_paths_apply_after_the_merge(project_dir):
    base = MINIMAL.replace("ppo_mini_batch_size: 4}", "ppo_mini_batch_size: 4, total_steps: {{ steps }}}")
    loaded = _load(
        project_dir,
        "base: base.yaml\nname: '{{ who }}'\ntrainer: {seed: 3}\n",
        ["steps=7", "who=me", "trainer.seed=4", "stages.1.on=driver"],
        base=base,
    )
    assert (loaded.spec.name, loaded.spec.trainer.total_steps, loaded.spec.trainer.seed) == ("me", 7, 4)
    assert loaded.spec.stages[1].on == "driver"
    resolved = yaml.safe_load(loaded.resolved_yaml())
    assert "base" not in resolved and resolved["trainer"]["total_steps"] == 7
    assert "base" not in loaded.data and loaded.rendered == "base: base.yaml\nname: 'me'\ntrainer: {seed: 3}\n"


def test_errors_point_into_the_file_that_wrote_the_value(project_dir):
    base = MINIMAL.replace("algorithm: {n: 4}", "algorithm: {n: 4, clip_ratoi: 0.2}").replace("on: driver", "on: drivr")
    problems = _problems(
        project_dir,
        """\
base: base.yaml
name: derived
trainer: {total_stepz: 3}
stages:
  reward: {on: rww}
""",
        base=base,
    )
    assert any(p.startswith("base.yaml:3:") and "algorithm.clip_ratoi: unknown key" in p for p in problems), problems
    assert any(p.startswith("base.yaml:12:") and "stages[3].on: unknown resource 'drivr'" in p for p in problems)
    assert any(p.startswith("derived.yaml:3:") and "trainer.total_stepz: unknown key" in p for p in problems)
    assert any(p.startswith("derived.yaml:5:") and "stages[1].on: unknown resource 'rww'" in p for p in problems)


def test_errors_inside_a_base_are_reported_in_the_base(project_dir):
    problems = _problems(project_dir, "base: base.yaml\n", base=MINIMAL.replace("name: tiny", "name: {{ nme }}"))
    assert any(p.startswith("base.yaml:1:") and "undefined template variable 'nme'" in p for p in problems), problems
    problems = _problems(project_dir, "base: base.yaml\n", base=MINIMAL.replace("  rw:", "\trw:"))
    assert any(p.startswith("base.yaml:7:") and "YAML syntax error" in p for p in problems), problems


@pytest.mark.parametrize(
    ("derived", "bases", "expected"),
    [
        ("base: nope.yaml\n", {}, "derived.yaml:1:7: base: cannot read the base pipeline nope.yaml: No such file"),
        ("base: [a.yaml]\n", {}, "derived.yaml:1:7: base: expected the path of a pipeline file, got ['a.yaml']"),
        ("name: x\nbase: derived.yaml\n", {}, "derived.yaml:2:7: base: 'derived.yaml' is already in this chain"),
        ("base: a.yaml\n", {"a": "base: b.yaml\n", "b": "base: a.yaml\n"}, "b.yaml:1:7: base: 'a.yaml' is already in"),
        (
            "base: a.yaml\n",
            {"a": "- 1\n"},
            "derived.yaml:1:7: base: the base a.yaml is not a pipeline: its top level is a list, not a mapping",
        ),
        ("base: a.yaml\n", {"a": "# nothing\n"}, "its top level is nothing (only comments), not a mapping"),
        (
            "base: a.yaml\nstages:\n  genrate: {on: driver}\n",
            {"a": MINIMAL},
            "derived.yaml:3:3: stages.genrate: the base has no stage named 'genrate' (did you mean 'generate'?)",
        ),
        (
            "base: a.yaml\nstages:\n  extra: {on: driver}\n",
            {"a": MINIMAL},
            "to add a stage, write the whole stages list",
        ),
        (
            "base: a.yaml\nstages:\n  generate: driver\n",
            {"a": MINIMAL},
            "derived.yaml:3:13: stages.generate: a stage patch is a mapping of the keys to change, got 'driver'",
        ),
        (
            "base: a.yaml\nstages: {generate: {on: driver}}\n",
            {"a": "name: a\n"},
            "derived.yaml:2:1: stages: a mapping under stages: patches the base's stages by name, but the base has no list",
        ),
    ],
)
def test_base_errors_name_the_file_line_and_fix(derived, bases, expected, project_dir):
    problems = _problems(project_dir, derived, **bases)
    assert any(expected in p for p in problems), problems


def test_the_remote_pipeline_trains_what_the_local_one_trains(monkeypatch):
    monkeypatch.chdir(REPO)
    local = load_pipeline("pipelines/bird_grpo.yaml").spec.model_dump(by_alias=True)
    remote = load_pipeline("pipelines/bird_grpo_remote.yaml").spec.model_dump(by_alias=True)
    assert remote["name"] != local["name"]
    assert set(remote["resources"]) == {"arctic", "reward_pool"}
    assert {s["on"] for s in remote["stages"]} == {"arctic", "reward_pool", "driver"}
    for spec in (local, remote):
        del spec["name"], spec["resources"]
        for stage in spec["stages"]:
            del stage["on"]
    assert remote == local


def test_a_long_chain_of_bases_is_refused_by_its_length_and_sixteen_still_load(project_dir):
    """A chain of 1,000 bases recursed until Python gave up, reported as "document nests too deeply"."""
    (project_dir / "b0.yaml").write_text(MINIMAL)
    for i in range(1, 1001):
        (project_dir / f"b{i}.yaml").write_text(f"base: b{i - 1}.yaml\n")
    assert _load(project_dir, "base: b15.yaml\n").spec  # 16 bases
    (problem,) = _problems(project_dir, "base: b1000.yaml\n")
    assert (
        problem
        == "b985.yaml:1:7: base: more than 16 bases in a chain, from derived.yaml (merge some of the bases into one file)"
    )
