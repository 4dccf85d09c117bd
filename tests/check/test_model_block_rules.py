"""The rules of the models beside the policy (rlflow.check.model_blocks) through ``load_pipeline``: each corpus
file (tests/schemas/broken/reward_model_*, distillation_*, teacher_*, models_*) reports exactly what its header
says; here also what the corpus cannot hold: a teacher of another vocabulary, the paths, the memory fit."""

from __future__ import annotations

import json

import pytest
from schema_helpers import BROKEN, MINIMAL, load_text, problems_of, read_case
from test_model_memory import SMALL, VOCAB, inventory, memory_problems, write_header

from rlflow.check import load_pipeline
from rlflow.check.model_memory import qwen2_shapes
from rlflow.errors import ConfigError
from rlflow.schemas.project import load_project_config

CORPUS = sorted(
    p.stem
    for p in BROKEN.glob("*.yaml")
    if p.stem.startswith(("reward_model_", "distillation_", "teacher_", "models_"))
)
RM = MINIMAL.replace("stages:\n", 'reward_model: {model_path: "builtin:tiny-qwen2"}\nstages:\n') + (
    "  - {name: rm, uses: rm_score, on: pool}\n"
)
DISTILL = MINIMAL.replace(
    "stages:\n", "distillation: {enabled: true, teacher_models: {t: {model_path: TEACHER}}}\nstages:\n"
) + ("  - {name: teacher, uses: teacher_log_prob, on: pool}\n")


def diagnostics_of(path, project_dir) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, read_case(path)["set"], load_project_config(project_dir), check_paths=False)
    return [str(d) for d in info.value.diagnostics]


def test_the_corpus_holds_the_main_mistakes():
    assert len(CORPUS) >= 7, CORPUS


@pytest.mark.parametrize("stem", CORPUS)
def test_each_corpus_file_reports_exactly_its_lines(stem, project_dir):
    path = BROKEN / f"{stem}.yaml"
    found = diagnostics_of(path, project_dir)
    expect = read_case(path)["expect"]
    assert len(found) == len(expect), found
    for line, text in expect:
        assert any(f"{path}:{line}:" in d and text in d for d in found), found


def test_a_reward_model_and_a_teacher_beside_the_policy_validate(project_dir):
    assert load_text(project_dir, RM).spec.reward_model.model_path == "builtin:tiny-qwen2"
    assert load_text(project_dir, DISTILL.replace("TEACHER", "builtin:tiny-qwen2")).spec.distillation.enabled


def test_a_model_reward_stage_alone_is_the_steps_reward(project_dir):
    text = RM.replace("  - {name: reward, uses: text2sql_reward, on: rw}\n", "").replace("  rw: {type: cpu}\n", "")
    spec = load_text(project_dir, text).spec
    assert [s.uses for s in spec.stages if s.uses in ("rm_score", "text2sql_reward")] == ["rm_score"]


def test_validation_without_a_rule_reward_is_a_warning(project_dir):
    text = RM.replace("  - {name: reward, uses: text2sql_reward, on: rw}\n", "").replace("  rw: {type: cpu}\n", "")
    text = text.replace("data: {train: data/train.json}", "data: {train: data/train.json, val: data/val.json}")
    warnings = [str(w) for w in load_text(project_dir, text).warnings]
    assert any("validation scores with the rule reward stages only" in w for w in warnings), warnings


def test_two_model_reward_stages_are_one_line_each_not_a_dataflow_error(project_dir):
    text = RM + "  - {name: rm2, uses: rm_score, on: pool}\n"
    (problem,) = problems_of(project_dir, text)
    assert "stages rm and rm2 both score with the reward model" in problem
    assert "two producers" not in problem.split("(one producer")[0]


def test_distillation_without_its_stage_is_not_also_a_missing_field(project_dir):
    text = DISTILL.replace("TEACHER", "builtin:tiny-qwen2").replace(
        "  - {name: teacher, uses: teacher_log_prob, on: pool}\n", ""
    )
    (problem,) = problems_of(project_dir, text)
    assert "distillation.enabled is true, but no stage computes the teachers' log-probs" in problem


def tokenizer_folder(folder, vocab: dict[str, int]):
    folder.mkdir()
    model = {"type": "BPE", "vocab": vocab, "merges": []}
    (folder / "tokenizer.json").write_text(json.dumps({"model": model, "added_tokens": []}))
    return folder


def test_a_teacher_of_another_vocabulary_is_one_line(project_dir):
    tokenizer_folder(project_dir / "student", {"a": 0, "b": 1})
    tokenizer_folder(project_dir / "teacher", {"a": 0, "c": 1, "d": 2})
    tokenizer_folder(project_dir / "twin", {"a": 0, "b": 1})
    text = DISTILL.replace("TEACHER", "teacher").replace("name: tiny\n", "name: tiny\nmodel: {path: student}\n")
    (problem,) = problems_of(project_dir, text)
    assert "distillation.teacher_models.t.model_path: teacher t's tokenizer (3 tokens) is not the student's" in problem
    assert "need one vocabulary" in problem and "\n" not in problem
    assert load_text(project_dir, text.replace("model_path: teacher", "model_path: twin")).spec


def test_a_builtin_teacher_shares_the_builtin_students_tokenizer(project_dir):
    text = DISTILL.replace("TEACHER", "builtin:tiny-rank-warm")
    assert load_text(project_dir, text).spec.distillation.teacher_models["t"].model_path == "builtin:tiny-rank-warm"


def test_the_model_paths_must_exist(project_dir):
    from rlflow.check import load_pipeline

    text = (
        RM.replace("builtin:tiny-qwen2", "models/rm")
        + "distillation: {teacher_models: {t: {model_path: builtin:nope}}}\n"
    )
    (project_dir / "p.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(project_dir / "p.yaml", (), load_project_config(project_dir))
    found = [str(d) for d in info.value.diagnostics]
    assert any("reward_model.model_path: no folder at" in d and "builtin:tiny-rank-rm" in d for d in found), found
    assert any("distillation.teacher_models.t.model_path: unknown built-in 'builtin:nope'" in d for d in found)


def test_the_reward_model_counts_its_weights_on_its_pool(tmp_path):
    """A 1.5B policy (GRPO, bf16) and a 1.5B reward model: the model adds its weights only (2.9 GB), no optimizer."""
    rm = tmp_path / "rm"
    rm.mkdir()
    write_header(rm / "model.safetensors", qwen2_shapes(SMALL, VOCAB))
    policy = tmp_path / "policy"
    policy.mkdir()
    write_header(policy / "model.safetensors", qwen2_shapes(SMALL, VOCAB))
    text = (
        MINIMAL.replace("name: tiny\n", f'name: tiny\nmodel: {{path: "{policy}", dtype: bfloat16}}\n')
        .replace("device: cpu", "device: gpu, gpus_per_node: 8")
        .replace("stages:\n", f'reward_model: {{model_path: "{rm}"}}\nstages:\n')
        + "  - {name: rm, uses: rm_score, on: pool}\n"
    )
    inventory(tmp_path, {"gpu_memory_gb": 24})
    (problem,) = memory_problems(tmp_path, text)
    assert "holds model (actor, rollout) and reward_model: at least 25.9 GB" in problem, problem
    assert "reward_model 2.9 GB" in problem
    assert "put the reward model's stage on a pool of its own (reward_model.enable_resource_pool: true)" in problem
    inventory(tmp_path, {"gpu_memory_gb": 40})
    assert memory_problems(tmp_path, text) == []
