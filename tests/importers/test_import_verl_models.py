"""verl's models beside the policy as pipelines: a reward model (own pool, colocated, legacy spelling, a
generative judge left to write by hand) and distillation teachers; what is listed; `rlflow validate` passes."""

from __future__ import annotations

from rlflow.check import load_pipeline
from rlflow.importers.verl_config import read_verl_config
from rlflow.importers.verl_pipeline import convert
from rlflow.schemas.pipeline import Pipeline
from rlflow.schemas.project import load_project_config

POLICY = "builtin:tiny-rank-warm"
GRPO = ["algorithm.adv_estimator=grpo", f"actor_rollout_ref.model.path={POLICY}"]
RM_ON = ["reward.reward_model.enable=True", "reward.reward_model.model_path=builtin:tiny-rank-rm"]
TWO_TEACHERS = [
    "distillation.enabled=True",
    f"+distillation.teacher_models.math.model_path={POLICY}",
    "+distillation.teacher_models.math.key=openai/gsm8k",
    f"+distillation.teacher_models.code.model_path={POLICY}",
    "+distillation.teacher_models.code.key=codecontests",
    "+distillation.teacher_models.code.inference.dtype=fp32",
    "distillation.distillation_loss.loss_mode=forward_kl_topk",
    "distillation.distillation_loss.topk=8",
    "distillation.distillation_loss.use_task_rewards=False",
]


def converted(*overrides: str):
    return convert(read_verl_config("ppo_trainer", [*GRPO, *overrides]))


def steps(pipeline: dict) -> list[tuple[str, str, str]]:
    return [(s["name"], s["uses"], s["on"]) for s in pipeline["stages"]]


def dropped(conversion) -> dict[str, str]:
    return {line.partition(":")[0]: line for line in conversion.dropped}


def validates(conversion, tmp_path) -> Pipeline:
    """The written file passes `rlflow validate` (data files aside: verl's defaults name files not here)."""
    (tmp_path / "rlflow.yaml").write_text("vars: {}\n")
    (tmp_path / "p.yaml").write_text(conversion.render("p.yaml"))
    loaded = load_pipeline(tmp_path / "p.yaml", (), load_project_config(tmp_path), check_paths=False)
    assert loaded.warnings == ()
    return loaded.spec


def test_a_reward_model_on_a_pool_of_its_own(tmp_path):
    conversion = converted(
        *RM_ON,
        "reward.reward_model.enable_resource_pool=True",
        "reward.reward_model.rollout.dtype=fp32",  # the policy's dtype: rlflow's null gives it
        "reward.reward_model.rollout.response_length=16",
    )
    p = conversion.pipeline
    assert steps(p)[:3] == [
        ("generate", "generate", "actor_pool"),
        ("rm_score", "rm_score", "rm_pool"),
        ("reward", "reward_function", "reward_pool"),
    ]
    assert p["resources"]["rm_pool"] == {"type": "local", "device": "gpu"}
    assert p["reward_model"] == {
        "model_path": "builtin:tiny-rank-rm",
        "enable_resource_pool": True,
        "rollout": {"response_length": 16},
    }
    assert any(line.startswith("reward.reward_model.enable=True: verl's training reward") for line in conversion.notes)
    spec = validates(conversion, tmp_path)
    assert spec.reward_model.enable_resource_pool and spec.reward_model.combine == "replace"


def test_a_colocated_reward_model_runs_on_the_actors_pool_in_verls_dtype(tmp_path):
    conversion = converted(*RM_ON)
    p = conversion.pipeline
    assert ("rm_score", "rm_score", "actor_pool") in steps(p) and "rm_pool" not in p["resources"]
    assert p["reward_model"] == {
        "model_path": "builtin:tiny-rank-rm",
        "enable_resource_pool": False,
        "dtype": "bfloat16",  # verl's reward model rollout.dtype default; rlflow's null would be model.dtype
    }
    assert conversion.dropped == []
    validates(conversion, tmp_path)


def test_verls_legacy_reward_model_spelling_wins_as_verl_migrates_it(tmp_path):
    conversion = converted(
        "reward_model.enable=True",
        "reward_model.enable_resource_pool=True",
        "reward_model.model.path=builtin:tiny-rank-rm",
        "reward.reward_model.model_path=/not/this/one",
        "+reward_model.micro_batch_size_per_gpu=4",
        "+reward_model.max_length=1024",
        "reward_model.rollout.dtype=bf16",
    )
    p = conversion.pipeline
    assert p["reward_model"] == {
        "model_path": "builtin:tiny-rank-rm",
        "enable_resource_pool": True,
        "dtype": "bfloat16",
        "micro_batch_size_per_gpu": 4,
        "max_length": 1024,
    }
    assert conversion.origins["reward_model.model_path"] == "reward_model.model.path"
    assert ("rm_score", "rm_score", "rm_pool") in steps(p)
    assert "reward.reward_model.model_path" not in dropped(conversion), "verl overwrites it with the legacy one"
    validates(conversion, tmp_path)


def test_a_generative_reward_model_is_listed_as_a_judge_to_write_by_hand():
    conversion = converted(
        *RM_ON,
        "reward.custom_reward_function.path=/abs/genrm.py",
        "reward.custom_reward_function.name=score",
    )
    assert "rm_score" not in [s["uses"] for s in conversion.pipeline["stages"]]
    assert "reward_model" not in conversion.pipeline
    lines = dropped(conversion)
    assert set(lines) == {"reward.reward_model.enable", "reward.reward_model.model_path"}
    assert all("judge_score stage (with.template, with.parse)" in line for line in lines.values())


def test_two_teachers_keyed_by_data_source(tmp_path):
    conversion = converted(*TWO_TEACHERS)
    p = conversion.pipeline
    assert steps(p)[:3] == [
        ("generate", "generate", "actor_pool"),
        ("teacher_log_prob", "teacher_log_prob", "teacher_pool"),
        ("reward", "reward_function", "reward_pool"),
    ]
    assert p["resources"]["teacher_pool"] == {"type": "local", "device": "gpu"}
    assert p["distillation"] == {
        "enabled": True,
        "teacher_models": {  # verl's placeholder teacher_model (no model_path) is left out
            "math": {"key": "openai/gsm8k", "model_path": POLICY},
            "code": {"key": "codecontests", "model_path": POLICY, "dtype": "float32"},
        },
        "distillation_loss": {"loss_mode": "forward_kl_topk", "topk": 8, "use_task_rewards": False},
    }
    assert conversion.dropped == []
    spec = validates(conversion, tmp_path)
    assert spec.distillation.teacher_for("codecontests") == "code"


def test_teachers_and_reward_model_together_follow_generate(tmp_path):
    conversion = converted(*TWO_TEACHERS, *RM_ON)
    assert [s[0] for s in steps(conversion.pipeline)[:4]] == ["generate", "teacher_log_prob", "rm_score", "reward"]
    validates(conversion, tmp_path)


def test_what_the_models_cannot_carry_is_listed_with_why():
    conversion = converted(
        *RM_ON,
        *TWO_TEACHERS,
        "reward.reward_model.enable_resource_pool=True",
        "reward.reward_model.n_gpus_per_node=2",
        "reward.reward_model.nnodes=1",
        "reward.reward_model.rollout.gpu_memory_utilization=0.3",
        "reward.reward_model.rollout.tensor_model_parallel_size=1",
        "reward.reward_model.rollout.max_num_seqs=64",
        "distillation.n_gpus_per_node=4",
        "distillation.nnodes=1",
        "+distillation.teacher_models.math.num_replicas=2",
        "+distillation.teacher_models.math.inference.gpu_memory_utilization=0.3",
    )
    lines = dropped(conversion)
    assert set(lines) == {
        "reward.reward_model.n_gpus_per_node",
        "reward.reward_model.nnodes",
        "reward.reward_model.rollout.gpu_memory_utilization",
        "reward.reward_model.rollout.tensor_model_parallel_size",
        "reward.reward_model.rollout.max_num_seqs",
        "distillation.n_gpus_per_node",
        "distillation.nnodes",
        "distillation.teacher_models.math.num_replicas",
        "distillation.teacher_models.math.inference.gpu_memory_utilization",
    }
    assert lines["reward.reward_model.n_gpus_per_node"] == (
        "reward.reward_model.n_gpus_per_node: 2: the reward model's pool is rm_pool: set its gpus_per_node and "
        "nnodes in resources"
    )
    assert "without a vLLM engine" in lines["reward.reward_model.rollout.max_num_seqs"]
    assert "teacher_pool" in lines["distillation.nnodes"]
    assert "without a vLLM engine" in lines["distillation.teacher_models.math.inference.gpu_memory_utilization"]


def test_a_models_keys_are_listed_as_ignored_when_verl_leaves_it_off():
    conversion = converted(
        "reward.reward_model.model_path=/m/rm",
        "+distillation.teacher_models.math.model_path=/m/t",
    )
    assert "reward_model" not in conversion.pipeline and "distillation" not in conversion.pipeline
    assert [s["uses"] for s in conversion.pipeline["stages"]][:2] == ["generate", "reward_function"]
    assert conversion.dropped == [
        "distillation.teacher_models.math.model_path: /m/t: distillation.enabled is false, so verl ignores it too",
        "reward.reward_model.model_path: /m/rm: reward.reward_model.enable is false, so verl ignores it too",
    ]
