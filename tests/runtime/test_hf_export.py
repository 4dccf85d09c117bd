"""``export_run``: which checkpoint of a run is exported, and every refusal, on checkpoints the local engine writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rlflow.backends.local.local_engine import LocalEngine
from rlflow.errors import ExportError, TargetExists
from rlflow.runtime.hf_export import export_run, find_checkpoint
from rlflow.schemas.pipeline import Pipeline

STAGES = [
    {"name": "generate", "uses": "generate", "on": "pool"},
    {"name": "reward", "uses": "text2sql_reward", "on": "driver"},
    {"name": "old_log_prob", "uses": "old_log_prob", "on": "pool"},
    {"name": "advantage", "uses": "grpo_advantage", "on": "driver"},
    {"name": "update_actor", "uses": "update_actor", "on": "pool"},
    {"name": "sync_weights", "uses": "sync_weights", "on": "pool"},
]


def pipeline(pool: dict) -> Pipeline:
    return Pipeline.model_validate(
        {
            "name": "export-test",
            "model": {"path": "builtin:tiny-qwen2", "dtype": "bfloat16"},
            "data": {"train": "train.json", "max_prompt_length": 32, "max_response_length": 8},
            "algorithm": {"n": 2},
            "trainer": {"train_batch_size": 2, "ppo_mini_batch_size": 2, "save_freq": 1},
            "resources": {"pool": pool},
            "stages": STAGES,
        }
    )


def write_checkpoint(run: Path, step: int, spec: Pipeline, engine: LocalEngine | None) -> Path:
    """A checkpoint as the runtime lays it out: the engine's part, the resolved pipeline, the trainer state last."""
    path = run / "checkpoints" / f"step_{step}"
    path.mkdir(parents=True)
    if engine is not None:
        engine.save_checkpoint(str(path), step)
    resolved = yaml.safe_dump(spec.model_dump(by_alias=True, mode="json"), sort_keys=False)
    (path / "pipeline.resolved.yaml").write_text(resolved)
    (run / "pipeline.resolved.yaml").write_text(resolved)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    """A run with complete checkpoints at steps 1 and 2 and a half-written one at step 3."""
    run = tmp_path_factory.mktemp("run")
    spec = pipeline({"type": "local", "device": "cpu"})
    engine = LocalEngine(spec)
    for step in (1, 2):
        write_checkpoint(run, step, spec, engine)
    shutil.copytree(run / "checkpoints" / "step_2", run / "checkpoints" / ".tmp-step_3")
    (run / "checkpoints" / ".tmp-step_3" / "trainer_state.json").unlink()
    return run


def test_the_latest_complete_checkpoint_is_the_default(local_run, tmp_path):
    assert find_checkpoint(local_run, None).name == "step_2"
    done = export_run(local_run, tmp_path / "model")
    assert (done.step, done.dtype, done.checkpoint.name) == (2, "bfloat16", "step_2")
    assert json.loads((tmp_path / "model" / "config.json").read_text())["dtype"] == "bfloat16"
    assert not list(tmp_path.glob(".*tmp-export")), "the staging folder is renamed into place"


def test_a_step_is_picked_and_a_missing_one_lists_those_there_are(local_run, tmp_path):
    assert export_run(local_run, tmp_path / "m1", step=1).checkpoint.name == "step_1"
    with pytest.raises(ExportError, match=r"no checkpoint of step 7; steps with a checkpoint: 1, 2 \(--step N\)"):
        find_checkpoint(local_run, 7)


def test_an_incomplete_checkpoint_is_refused(local_run):
    with pytest.raises(ExportError, match="checkpoint step 3 is incomplete .*complete ones: 1, 2"):
        find_checkpoint(local_run, 3)


def test_a_run_without_checkpoints_or_no_run_at_all_is_named(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ExportError, match="no complete checkpoint to export .*trainer.save_freq"):
        find_checkpoint(tmp_path / "run", None)
    with pytest.raises(ExportError, match="no such run directory"):
        find_checkpoint(tmp_path / "nowhere", None)


def test_nothing_is_overwritten(local_run, tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(TargetExists, match="is not empty"):
        export_run(local_run, target)
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_run(local_run, empty).out == empty and (empty / "model.safetensors").is_file()


def test_a_remote_backends_own_checkpoint_is_named_as_such(tmp_path):
    spec = pipeline({"type": "remote", "backend": "reference"})
    write_checkpoint(tmp_path, 1, spec, engine=None)
    with pytest.raises(ExportError) as info:
        export_run(tmp_path, tmp_path / "model")
    message = str(info.value)
    assert "holds no Hugging Face model (rank_0/model/)" in message
    assert "resource 'pool', remote backend 'reference'" in message and "that backend's tools" in message
    assert not (tmp_path / "model").exists()


PPO_STAGES = [
    *STAGES[:3],
    {"name": "values", "uses": "compute_values", "on": "pool"},
    STAGES[3],
    {"name": "update_critic", "uses": "update_critic", "on": "pool"},
    *STAGES[4:],
]


def ppo_pipeline(critic: dict) -> Pipeline:
    data = pipeline({"type": "local", "device": "cpu"}).model_dump(by_alias=True, mode="json")
    data.update(algorithm={"n": 2, "adv_estimator": "gae"}, stages=PPO_STAGES, critic=critic)
    return Pipeline.model_validate(data)


def rollout(engine: LocalEngine):
    """Two prompts x 2 samples the engine generates, with random returns and its critic's values."""
    import torch

    from rlflow.backends.local.models import build_prompt_batch

    batch = build_prompt_batch(engine.tokenizer, ["How many singers are there?", "SELECT"], 32).repeat_interleave(2)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "do_sample": True, "max_response_length": 8, "seed": 3}
    batch.update(engine.generate(batch, params))
    batch.update(engine.compute_values(batch, {}))
    batch["returns"] = torch.randn(batch["values"].shape, generator=torch.Generator().manual_seed(0))
    batch["returns"] *= batch["response_mask"]
    return batch


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory) -> tuple[Path, Pipeline, LocalEngine]:
    """A run whose one worker holds the policy (bfloat16) and a critic in float32 trained one step; its
    checkpoint at step 1."""
    run = tmp_path_factory.mktemp("ppo")
    spec = ppo_pipeline({"model": {"dtype": "float32"}, "optim": {"lr": 1e-2}})
    engine = LocalEngine(spec, roles=frozenset({"actor", "rollout", "critic"}))
    engine.update_critic(rollout(engine), {"global_steps": 1})
    write_checkpoint(run, 1, spec, engine)
    return run, spec, engine


def test_the_critic_exports_as_a_token_classification_model_giving_the_same_values(ppo_run, tmp_path):
    import torch
    from transformers import AutoModelForTokenClassification

    from rlflow.backends.local.critic import load_value_model, token_values

    run, spec, engine = ppo_run
    done = export_run(run, tmp_path / "critic", model="critic")
    assert (done.model, done.dtype, done.step) == ("critic", "float32", 1)  # critic.model.dtype, not model.dtype
    config = json.loads((tmp_path / "critic" / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForTokenClassification"] and len(config["id2label"]) == 1  # one label
    assert (tmp_path / "critic" / "tokenizer.json").is_file()
    assert not (tmp_path / "critic" / "generation_config.json").exists()

    exported = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "critic"), local_files_only=True)
    assert exported.dtype == torch.float32
    batch = rollout(engine)
    with torch.no_grad():
        values = token_values(
            exported.eval(), batch["prompts"], batch["prompt_mask"], batch["responses"], batch["response_mask"]
        )
    assert torch.equal(values, batch["values"]) and values.abs().sum() > 0

    # as critic.model.path the directory loads as it is (the trained head, not a fresh one)
    again = ppo_pipeline({"model": {"path": str(tmp_path / "critic"), "dtype": "float32"}})
    loaded = load_value_model(again, engine.tokenizer, root=None, device=torch.device("cpu")).state_dict()
    trained = engine.critic.model.state_dict()
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)

    policy = export_run(run, tmp_path / "policy")  # the default is the policy, as before
    assert (policy.model, policy.dtype) == ("policy", "bfloat16")
    assert json.loads((tmp_path / "policy" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]


def test_a_critic_in_the_policys_dtype_by_default(tmp_path):
    spec = ppo_pipeline({})
    write_checkpoint(tmp_path, 1, spec, LocalEngine(spec, roles=frozenset({"critic"})))
    done = export_run(tmp_path, tmp_path / "critic", model="critic")
    assert done.dtype == "bfloat16"
    assert json.loads((tmp_path / "critic" / "config.json").read_text())["dtype"] == "bfloat16"


def test_a_run_without_a_critic_is_told_so_in_one_line(local_run, tmp_path):
    with pytest.raises(ExportError) as info:
        export_run(local_run, tmp_path / "critic", model="critic")
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{local_run}: this run trained no critic")
    assert "algorithm.adv_estimator is grpo" in message and "--model policy" in message
    assert not (tmp_path / "critic").exists()
    with pytest.raises(ExportError, match="--model 'value': .*use one of policy, critic"):
        export_run(local_run, tmp_path / "critic", model="value")


def test_a_missing_critic_part_is_named(ppo_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ppo_run[0], run)
    shutil.rmtree(run / "checkpoints" / "step_1" / "critic")
    with pytest.raises(ExportError, match=r"holds no Hugging Face model \(critic/rank_0/model/model.safetensors is"):
        export_run(run, tmp_path / "critic", model="critic")
    assert export_run(run, tmp_path / "policy").model == "policy"
