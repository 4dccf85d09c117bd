"""``rlflow import-verl`` as a verl user runs it: verl's GSM8K GRPO example, a custom reward, bad overrides."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rlflow.check import load_pipeline
from rlflow.errors import ConfigError
from rlflow.schemas.project import load_project_config

REPO = Path(__file__).resolve().parents[2]
VERL_CONFIG = Path(next(iter(importlib.util.find_spec("verl").submodule_search_locations))) / "trainer" / "config"
sys.path.insert(0, str(REPO / "tests" / "importers"))  # verl_examples: verl's PPO scripts, shared with the importer's

from verl_examples import ppo_overrides  # noqa: E402

# the overrides of verl's examples/grpo_trainer/run_qwen2-7b.sh, quoted as that script quotes them
GSM8K = r"""
    algorithm.adv_estimator=grpo \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    data.train_batch_size=1024 \
    data.max_prompt_length=512 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=True \
    data.truncation='error' \
    actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.actor.ppo_mini_batch_size=256 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger='["console","wandb"]' \
    trainer.project_name='verl_grpo_example_gsm8k' \
    trainer.experiment_name='qwen2_7b_function_rm' \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.save_freq=20 \
    trainer.test_freq=5 \
    trainer.total_epochs=15"""


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """``command`` through bash, so quotes and $HOME are the shell's, as in verl's scripts."""
    env = {**os.environ, "HOME": str(cwd), "PYTHONPATH": str(REPO)}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def rlflow_cmd() -> str:
    return f"{sys.executable} -m rlflow.cli.main"


def validated(path: Path, project: Path, sets=()):
    """The pipeline through rlflow's validator, as `rlflow validate --no-check-paths` runs it."""
    return load_pipeline(path, sets, load_project_config(project), check_paths=False).spec


def test_verls_gsm8k_example_becomes_a_valid_pipeline(tmp_path):
    (tmp_path / "rlflow.yaml").write_text("vars: {}\n")
    out = tmp_path / "gsm8k.yaml"
    result = shell(f"{rlflow_cmd()} import-verl {VERL_CONFIG / 'ppo_trainer.yaml'} \\{GSM8K} -o {out}", tmp_path)
    assert result.returncode == 0, result.stderr
    listed = [line.strip().split(":")[0] for line in result.stderr.splitlines() if line.startswith("  ")]
    assert sorted(listed) == [
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        "actor_rollout_ref.model.path=Qwen/Qwen2-7B-Instruct",  # a Hub id: rlflow needs a directory
        "actor_rollout_ref.ref.fsdp_config.param_offload",
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "data.filter_overlong_prompts=True",
        "trainer.experiment_name",
        "trainer.logger",
    ]
    text = out.read_text()
    for line in result.stderr.splitlines()[:-1]:  # the last line says where the file went
        assert f"# {line}" in text, "the listing is also at the top of the file"

    try:
        spec = validated(out, tmp_path)
    except ConfigError as exc:  # this environment has no vLLM: that, and only that, is refused
        assert [(d.path, d.message) for d in exc.diagnostics] == [
            ("stages[0].with.engine", "engine 'vllm' needs the vllm extra: pip install 'rlflow[vllm]'")
        ]
        spec = validated(out, tmp_path, ["stages.0.with.engine=torch"])
    assert spec.name == "verl_grpo_example_gsm8k"
    assert spec.model.path == "Qwen/Qwen2-7B-Instruct" and spec.model.gradient_checkpointing is True
    data = spec.data
    assert (data.format, data.train, data.val) == (
        "verl",
        f"{tmp_path}/data/gsm8k/train.parquet",
        f"{tmp_path}/data/gsm8k/test.parquet",
    )
    assert (data.max_prompt_length, data.max_response_length, data.truncation) == (512, 1024, "drop")
    alg = spec.algorithm
    assert (alg.adv_estimator, alg.n) == ("grpo", 5)
    assert (alg.clip_ratio, alg.clip_ratio_low, alg.clip_ratio_high, alg.clip_ratio_c) == (0.2, 0.2, 0.2, 3.0)
    assert (alg.use_kl_loss, alg.kl_loss_coef, alg.kl_loss_type, alg.entropy_coeff) == (True, 0.001, "low_var_kl", 0)
    assert alg.use_kl_in_reward is False
    t = spec.trainer
    assert (t.train_batch_size, t.ppo_mini_batch_size, t.ppo_micro_batch_size_per_gpu) == (1024, 256, 16)
    assert t.log_prob_micro_batch_size_per_gpu == 16 and t.optim.lr == 1e-6
    assert (t.total_epochs, t.save_freq, t.test_freq, t.critic_warmup) == (15, 20, 5, 0)
    pools = {name: r.model_dump() for name, r in spec.resources.items()}
    assert pools["actor_pool"] == {
        "type": "local",
        "device": "gpu",
        "gpus_per_node": 8,
        "nnodes": 1,
        "cpus_per_worker": 1.0,
        "resources": {},
        "label_selector": {},
    }
    assert pools["reward_pool"]["type"] == "cpu"
    stages = [(s.name, s.uses, s.on) for s in spec.stages]
    assert stages == [
        ("generate", "generate", "actor_pool"),
        ("reward", "reward_function", "reward_pool"),
        ("old_log_prob", "old_log_prob", "actor_pool"),
        ("ref_log_prob", "ref_log_prob", "actor_pool"),
        ("advantage", "grpo_advantage", "driver"),
        ("update_actor", "update_actor", "actor_pool"),
        ("sync_weights", "sync_weights", "actor_pool"),
    ]
    assert spec.stages[1].with_["function"] == "verl.utils.reward_score:default_compute_score"
    assert spec.stages[3].with_ == {"micro_batch_size": 16, "use_dynamic_bsz": False, "max_token_len": 16384}


def test_the_example_in_docs_verl_is_what_the_tool_writes(tmp_path):
    """docs/verl.md's command, run as written: its pools and stages and its listing are the tool's output."""
    doc = (REPO / "docs" / "verl.md").read_text()
    blocks = re.findall(r"```(\w*)\n(.*?)```", doc, re.S)
    (command,) = [text for lang, text in blocks if lang == "sh" and "-o pipelines/gsm8k_grpo.yaml" in text]
    command = command.split("\nrlflow validate")[0].replace("rlflow import-verl", f"{rlflow_cmd()} import-verl", 1)
    (tmp_path / "pipelines").mkdir()
    result = shell(command, tmp_path)
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "pipelines" / "gsm8k_grpo.yaml").read_text()
    (shown,) = [text for lang, text in blocks if lang == "yaml" and text.startswith("resources:\n  actor_pool:")]
    assert shown in written
    listing = [text for lang, text in blocks if lang == "" and text.startswith("converted")]
    assert listing == ["".join(line + "\n" for line in result.stderr.splitlines()[:-1])]


def test_an_imported_dapo_config_validates_without_advice_that_undoes_clip_higher(tmp_path):
    """verl's DAPO recipe: clip_ratio_low 0.2, clip_ratio_high 0.28 (and clip_ratio left at 0.2)."""
    (tmp_path / "rlflow.yaml").write_text("vars: {}\n")
    out = tmp_path / "dapo.yaml"
    overrides = "actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28"
    result = shell(
        f"{rlflow_cmd()} import-verl ppo_trainer algorithm.adv_estimator=grpo actor_rollout_ref.model.path=m "
        f"actor_rollout_ref.rollout.name=hf data.train_batch_size=16 actor_rollout_ref.actor.ppo_mini_batch_size=8 "
        f"{overrides} -o {out}",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    loaded = load_pipeline(out, (), load_project_config(tmp_path), check_paths=False)
    algo = loaded.spec.algorithm
    assert (algo.clip_ratio, algo.clip_ratio_low, algo.clip_ratio_high) == (0.2, 0.2, 0.28)
    assert loaded.warnings == ()


def test_a_users_config_with_a_custom_reward_round_trips(tmp_path):
    (tmp_path / "rlflow.yaml").write_text("vars: {}\n")
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "exact.py").write_text(
        "def exact(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return float(solution_str.strip() == str(ground_truth))\n"
    )
    (tmp_path / "my_grpo.yaml").write_text(
        "hydra: {searchpath: ['file://verl/trainer/config']}\n"
        "defaults: [ppo_trainer, _self_]\n"
        "algorithm: {adv_estimator: grpo}\n"
        "data: {train_files: data/train.parquet, train_batch_size: 8}\n"
        "actor_rollout_ref:\n"
        "  model: {path: models/tiny}\n"
        "  actor: {ppo_mini_batch_size: 4, use_dynamic_bsz: true}\n"
        "  rollout: {name: vllm, n: 4}\n"
        "custom_reward_function: {path: rewards/exact.py, name: exact}\n"
        "trainer: {n_gpus_per_node: 2, balance_batch: false}\n"
    )
    out = tmp_path / "p.yaml"
    result = shell(
        f"{rlflow_cmd()} import-verl my_grpo.yaml actor_rollout_ref.rollout.name=hf '+my.note=1' -o {out}", tmp_path
    )
    assert result.returncode == 0, result.stderr
    listed = [line.strip() for line in result.stderr.splitlines() if line.startswith("  ")]
    assert not any(line.startswith("actor_rollout_ref.actor.use_dynamic_bsz") for line in listed)  # carried over
    assert any(line.startswith("trainer.balance_batch: false: ") for line in listed)
    assert "my.note: 1: rlflow has no such setting" in listed
    assert not any(line.startswith(("algorithm.", "data.", "actor_rollout_ref.rollout.n")) for line in listed)

    spec = validated(out, tmp_path)  # loads rewards/exact.py from the project root: the reference is right
    (reward,) = [s for s in spec.stages if s.uses == "reward_function"]
    assert reward.with_ == {"function": "rewards/exact.py:exact"}
    assert spec.stages[0].with_["engine"] == "hf" and spec.algorithm.n == 4
    assert spec.resources["actor_pool"].gpus_per_node == 2 and spec.trainer.ppo_mini_batch_size == 4
    assert spec.trainer.use_dynamic_bsz and spec.trainer.ppo_max_token_len_per_gpu == 16384


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ("trainer.total_epochs", "error: override 'trainer.total_epochs' is malformed: missing EQUAL at '<EOF>'"),
        ("trainer.logger='[console'", "error: override 'trainer.logger=[console' is malformed: "),
        ("algorithm.adv_estimator=remax", "error: algorithm.adv_estimator: 'remax' (a command-line override): "),
    ],
)
def test_a_bad_override_is_one_line_and_exit_2(tmp_path, overrides, expected):
    result = shell(f"{rlflow_cmd()} import-verl ppo_trainer {overrides}", tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(expected) and "Traceback" not in result.stderr, result.stderr


@pytest.mark.slow  # Ray, torch and verl's reward in its child process: about a minute and a half
def test_an_imported_config_trains_with_verls_own_reward(tmp_path):
    """No custom reward: rows of verl's GSM8K data source score with verl's default_compute_score."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "rlflow.yaml").write_text("vars: {}\nlogging: {sinks: [jsonl]}\n")
    for split in ("train", "val"):
        rows = pq.read_table(REPO / "rlflow" / "assets" / "data" / "ranking" / f"{split}.parquet").to_pylist()
        rows = [{**row, "data_source": "openai/gsm8k"} for row in rows[:32]]  # answers after ####, as GSM8K's
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"{split}.parquet")
    model = REPO / "rlflow" / "assets" / "models" / "tiny-rank-warm"
    imported = shell(
        f"{rlflow_cmd()} import-verl ppo_trainer algorithm.adv_estimator=grpo "
        "data.train_files=train.parquet data.val_files=val.parquet data.train_batch_size=4 "
        f"data.max_prompt_length=64 data.max_response_length=16 actor_rollout_ref.model.path={model} "
        "actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.rollout.n=2 trainer.n_gpus_per_node=1 "
        "trainer.total_training_steps=2 trainer.test_freq=2 trainer.project_name=gsm8k reward.num_workers=1 -o p.yaml",
        tmp_path,
    )
    assert imported.returncode == 0, imported.stderr
    run = shell(f"{rlflow_cmd()} run p.yaml --set resources.actor_pool.device=cpu", tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    (run_dir,) = (tmp_path / "runs" / "gsm8k").iterdir()
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if "actor/pg_loss" in s] == [1, 2]
    # verl's GSM8K scorer returns a float, which verl's reward manager logs as acc
    score = [s["val-core/openai/gsm8k/acc/mean@1"] for s in steps if "val-core/openai/gsm8k/acc/mean@1" in s]
    assert "verl.utils.reward_score:default_compute_score" in (tmp_path / "p.yaml").read_text()
    assert score and 0 < score[-1] <= 1, "verl's GSM8K scorer found the warm start's right answers (greedy)"


def test_verls_ppo_example_imports_and_trains_two_steps_with_its_critic(tmp_path):
    """verl's examples/ppo_trainer/run_deepseek7b_llm.sh as written, then the model, data, reward and sizes
    of a CPU run (later overrides win, as in Hydra): two steps of PPO, the critic trained and checkpointed."""
    import json

    (tmp_path / "rlflow.yaml").write_text("vars: {}\nlogging: {sinks: [jsonl]}\n")
    model, data = (
        REPO / "rlflow" / "assets" / "models" / "tiny-rank-warm",
        REPO / "rlflow" / "assets" / "data" / "ranking",
    )
    small = [
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'val.parquet'}",
        "data.train_batch_size=4",
        "data.max_prompt_length=64",
        "data.max_response_length=16",
        f"actor_rollout_ref.model.path={model}",
        f"critic.model.path={model}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=2",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.project_name=ppo",
        "reward.num_workers=1",
        f"custom_reward_function.path={REPO / 'examples' / 'ranking' / 'reward.py'}",
        "custom_reward_function.name=compute_score",
    ]
    overrides = " ".join(shlex.quote(o) for o in [*ppo_overrides("run_deepseek7b_llm.sh", str(tmp_path)), *small])
    imported = shell(f"{rlflow_cmd()} import-verl ppo_trainer {overrides} -o p.yaml", tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert "critic.fsdp.param_offload: false: the critic is a whole replica per worker" in imported.stderr
    text = (tmp_path / "p.yaml").read_text()
    assert "  - {name: values, uses: compute_values, on: actor_pool}" in text
    assert "  - {name: update_critic, uses: update_critic, on: actor_pool}" in text

    # no vLLM here: the torch rollout; the pool on the CPU
    sets = "--set stages.0.with.engine=torch --set resources.actor_pool.device=cpu"
    run = shell(f"RAY_USAGE_STATS_ENABLED=0 {rlflow_cmd()} run p.yaml {sets}", tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs" / "ppo").iterdir()
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if "actor/pg_loss" in s] == [1, 2]
    assert [s["step"] for s in steps if "critic/vf_loss" in s and "critic/values/mean" in s] == [1, 2]
    assert (run_dir / "checkpoints" / "step_2" / "critic").is_dir(), "the last step saves (save_freq 20), critic too"


def _import_to(tmp_path, output: str) -> subprocess.CompletedProcess:
    return shell(f"{rlflow_cmd()} import-verl ppo_trainer algorithm.adv_estimator=grpo -o {output}", tmp_path)


def test_an_output_that_cannot_be_written_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("x")
    cases = {
        "folder": "error: folder: is a folder; give -o the path of the pipeline file to write",
        "afile/p.yaml": f"error: afile/p.yaml: cannot write there, {tmp_path / 'afile'} is a file, not a folder; ",
        "/proc/p.yaml": "error: /proc/p.yaml: cannot write: ",  # the kernel's folder: nobody writes there, root neither
    }
    for output, expected in cases.items():
        result = _import_to(tmp_path, output)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith(expected), result.stderr


def test_a_file_read_outside_the_configs_folder_is_named(tmp_path):
    config, elsewhere = tmp_path / "config", tmp_path / "elsewhere"
    (elsewhere / "data").mkdir(parents=True)
    config.mkdir()
    (elsewhere / "data" / "outside.yaml").write_text((VERL_CONFIG / "data" / "legacy_data.yaml").read_text())
    (config / "main.yaml").write_text("defaults:\n  - ppo_trainer\n  - _self_\nalgorithm:\n  adv_estimator: grpo\n")
    search = f"'hydra.searchpath=[file://{elsewhere},file://{VERL_CONFIG}]'"
    result = shell(f"{rlflow_cmd()} import-verl config/main.yaml {search} data=outside", tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"note: read {elsewhere / 'data' / 'outside.yaml'}, outside the config's folder" in result.stderr
    inside = shell(f"{rlflow_cmd()} import-verl config/main.yaml", tmp_path)
    assert inside.returncode == 0 and "outside the config's folder" not in inside.stderr
