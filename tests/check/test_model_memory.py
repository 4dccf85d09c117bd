"""The memory rule of the inventory check: the models each GPU pool holds against ``gpu_memory_gb``, counted from
safetensors headers written here (no weights: the rule reads only the header)."""

from __future__ import annotations

import json
import struct

import pytest
from schema_helpers import load_text, problems_of, write_project

from rlflow.check.model_memory import (
    builtin_shapes,
    parameters,
    qwen2_shapes,
    read_shapes,
    value_model_parameters,
    worker_bytes,
)
from rlflow.errors import ConfigError
from rlflow.plan.compile import compile_plan

# Qwen2-1.5B's shape (tied embeddings) and Qwen2-7B's (untied)
SMALL = dict(
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    tie_word_embeddings=True,
)
LARGE = dict(
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    tie_word_embeddings=False,
)
VOCAB, LARGE_VOCAB = 151936, 152064


def write_header(path, shapes, dtype="BF16", width=2):
    """A safetensors file's header (8-byte little-endian length, then JSON); the data it describes is left out."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        size = width * parameters({name: shape})
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


@pytest.fixture
def models(tmp_path):
    """A 1.5B-shaped model folder (one file) and a 7B-shaped one (two shards and their index)."""
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    large.mkdir()
    write_header(small / "model.safetensors", qwen2_shapes(SMALL, VOCAB))
    shapes = qwen2_shapes(LARGE, LARGE_VOCAB)
    names = list(shapes)
    halves = {"model-00001-of-00002.safetensors": names[:150], "model-00002-of-00002.safetensors": names[150:]}
    for file, part in halves.items():
        write_header(large / file, {name: shapes[name] for name in part})
    weight_map = {name: file for file, part in halves.items() for name in part}
    (large / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return small, large


def ppo(model, critic_pool="pool", gpus=8, extra=""):
    """A PPO step (gae, the reference policy for KL) on a GPU pool; the critic's stages on ``critic_pool``."""
    second = f"  {critic_pool}: {{type: local, device: gpu, gpus_per_node: {gpus}}}\n" if critic_pool != "pool" else ""
    return f"""\
name: ppo
model: {{path: "{model}", dtype: bfloat16}}
data: {{train: data/train.json}}
algorithm: {{adv_estimator: gae, n: 1, use_kl_loss: true}}
trainer: {{train_batch_size: 16, ppo_mini_batch_size: 8}}
resources:
  pool: {{type: local, device: gpu, gpus_per_node: {gpus}}}
{second}  rw: {{type: cpu}}
stages:
  - {{name: generate, uses: generate, on: pool}}
  - {{name: reward, uses: text2sql_reward, on: rw}}
  - {{name: old_log_prob, uses: old_log_prob, on: pool}}
  - {{name: ref_log_prob, uses: ref_log_prob, on: pool}}
  - {{name: values, uses: compute_values, on: {critic_pool}}}
  - {{name: advantage, uses: grpo_advantage, on: driver}}
  - {{name: update_critic, uses: update_critic, on: {critic_pool}}}
  - {{name: update_actor, uses: update_actor, on: pool{extra}}}
  - {{name: sync_weights, uses: sync_weights, on: pool}}
"""


def grpo(model, gpus=8, update_with=""):
    """A GRPO step (actor, reference, rollout on one GPU pool); ``update_with``: update_actor's ``with:``."""
    text = ppo(model, gpus=gpus, extra=f", with: {{{update_with}}}" if update_with else "")
    text = text.replace("adv_estimator: gae, n: 1", "n: 8")
    return "".join(line for line in text.splitlines(keepends=True) if "critic" not in line and "values" not in line)


def inventory(folder, memory, gpus=8, **more):
    write_project(folder, {"inventory": {"nodes": [{"name": "a", "gpus": gpus, "cpus": 64, **memory, **more}]}})


def memory_problems(folder, text):
    try:
        load_text(folder, text)
    except ConfigError:
        return [p for p in problems_of(folder, text) if "weights, gradients and optimizer state" in p]
    return []


def test_the_headers_count_every_parameter(models):
    small, large = models
    policy = read_shapes(small)
    assert parameters(policy) == 1_543_714_304  # Qwen2-1.5B
    assert parameters(read_shapes(large)) == 7_615_616_512  # Qwen2-7B, from its two shards
    assert value_model_parameters(policy) == 1_543_714_304 + 1536 + 1  # tied: the body keeps the embedding
    untied = read_shapes(large)
    assert value_model_parameters(untied) == 7_615_616_512 - LARGE_VOCAB * 3584 + 3584 + 1  # the LM head goes


def test_the_builtin_model_is_counted_as_the_backend_builds_it():
    from rlflow.backends.local.models import load_model
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    spec = ModelSpec(path="builtin:tiny-qwen2")
    model = load_model(spec, load_tokenizer(spec), seed=0)
    assert parameters(builtin_shapes("tiny-qwen2")) == sum(p.numel() for p in model.parameters())


def test_colocated_ppo_is_refused_on_40_gb_naming_both_models(models, tmp_path):
    small, _ = models
    inventory(tmp_path, {"gpu_memory_gb": 40})
    (problem,) = memory_problems(tmp_path, ppo(small))
    assert problem.startswith(
        "7:3: resources.pool: pool pool holds model (actor, ref, rollout) and critic: at least 48.9 GB of weights, "
        "gradients and optimizer state per GPU (model 25.9 GB, critic 23.0 GB); the inventory's GPUs have 40 GB"
    ), problem
    assert problem.endswith(
        "(put the critic's stages on a pool of its own, shard with update_actor.with.engine: deepspeed and "
        "zero_stage: 3, or use GPUs with more memory)"
    )


def test_colocated_ppo_fits_on_80_gb_and_on_two_pools_of_40_gb(models, tmp_path):
    small, _ = models
    inventory(tmp_path, {"gpu_memory_gb": 80})
    assert load_text(tmp_path, ppo(small)).spec
    inventory(tmp_path, {"gpu_memory_gb": 40}, gpus=16)  # 8 GPUs a pool
    assert load_text(tmp_path, ppo(small, critic_pool="critic_pool")).spec


def test_zero_shards_the_actor_over_the_pools_gpus(models, tmp_path):
    _, large = models
    inventory(tmp_path, {"gpu_memory_gb": 40})
    (torch,) = memory_problems(tmp_path, grpo(large))
    assert "holds model (actor, ref, rollout): at least 127.7 GB" in torch
    (zero1,) = memory_problems(tmp_path, grpo(large, update_with="engine: deepspeed, zero_stage: 1"))
    assert "at least 53.2 GB" in zero1 and "zero_stage: 3" in zero1
    assert load_text(tmp_path, grpo(large, update_with="engine: deepspeed, zero_stage: 3")).spec  # 28.4 GB
    inventory(tmp_path, {"gpu_memory_gb": 40}, gpus=2)
    (two,) = memory_problems(tmp_path, grpo(large, gpus=2, update_with="engine: deepspeed, zero_stage: 3"))
    assert "at least 70.9 GB" in two and "(give the pool more GPUs (ZeRO shards over them), or use GPUs" in two


def test_the_share_of_each_role(models, tmp_path):
    """Per worker of 8: the actor's weights and gradients in bf16, Adam's moments and the master weights (12 bytes)
    divided by ZeRO-1, and the reference's copy; the rollout shares the actor's weights."""
    small, _ = models
    write_project(tmp_path)
    plan = compile_plan(load_text(tmp_path, grpo(small, update_with="engine: deepspeed, zero_stage: 1")).spec)
    params = 1_543_714_304
    [(roles, total)] = worker_bytes(plan, "pool", {"model": params}, {"model": "bfloat16"}).values()
    assert roles == ("actor", "ref", "rollout") and total == params * (2 + 2 + 12 / 8 + 2)
    plan = compile_plan(load_text(tmp_path, ppo(small, critic_pool="critic_pool")).spec)
    held = worker_bytes(plan, "critic_pool", {"critic": params}, {"critic": "float32"})
    assert held == {"critic": (("critic",), params * (4 + 4 + 8))}  # float32: no master weights


@pytest.mark.parametrize("memory", [{}, {"gpu_memory_gb": None}])
def test_no_memory_given_no_memory_check(memory, models, tmp_path):
    inventory(tmp_path, memory)
    assert load_text(tmp_path, ppo(models[0])).spec


def test_no_inventory_or_no_model_folder_no_memory_check_and_the_builtin_model_counts(models, tmp_path):
    write_project(tmp_path)
    assert load_text(tmp_path, ppo(models[0])).spec
    inventory(tmp_path, {"gpu_memory_gb": 1})
    assert load_text(tmp_path, ppo(tmp_path / "absent")).spec  # the path check reports it, when asked
    assert load_text(tmp_path, ppo("builtin:tiny-qwen2")).spec  # 3.5M parameters a model: 0.12 GB in float32
    inventory(tmp_path, {"gpu_memory_gb": 0.1})
    (problem,) = memory_problems(tmp_path, ppo("builtin:tiny-qwen2").replace("dtype: bfloat16", "dtype: float32"))
    assert "at least 0.12 GB" in problem and "(model 0.065 GB, critic 0.052 GB)" in problem


def test_the_smallest_gpus_a_pool_may_use(models, tmp_path):
    nodes = [
        {"name": "big", "gpus": 8, "cpus": 64, "gpu_memory_gb": 80},
        {"name": "small", "gpus": 8, "cpus": 64, "gpu_memory_gb": 40, "labels": {"zone": "east"}},
    ]
    write_project(tmp_path, {"inventory": {"nodes": nodes}})
    text = ppo(models[0])
    (problem,) = memory_problems(tmp_path, text)
    assert "the smallest GPUs it may use (small's) have 40 GB" in problem
    pinned = text.replace("gpus_per_node: 8}", "gpus_per_node: 8, label_selector: {zone: '!east'}}")
    assert load_text(tmp_path, pinned).spec  # only the 80 GB node is left to it


def test_gpu_memory_gb_is_positive(tmp_path):
    from rlflow.schemas.project import load_project_config

    (tmp_path / "rlflow.yaml").write_text("inventory:\n  nodes:\n    - {name: a, gpus: 8, cpus: 4, gpu_memory_gb: 0}\n")
    with pytest.raises(ConfigError) as info:
        load_project_config(tmp_path)
    assert str(info.value.diagnostics[0]).endswith(
        "rlflow.yaml:3:50: inventory.nodes[0].gpu_memory_gb: should be greater than 0; got 0"
    ), info.value
