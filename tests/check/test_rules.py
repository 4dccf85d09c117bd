"""The semantic rules, one at a time: weight paths, reference policy, batch sizes, inventory, plugins."""

from __future__ import annotations

import sys

import pytest
from schema_helpers import MINIMAL, load_text, problems_of, write_project

from rlflow.stages.registry import STAGE_KINDS

REMOTE = """\
name: remote
data: {train: data/train.json}
algorithm: {n: 4}
trainer: {train_batch_size: 8, ppo_mini_batch_size: 4}
resources:
  srv: {type: remote, backend: reference}
  other: {type: remote, backend: reference}
  pool: {type: local, device: cpu}
  rw: {type: cpu}
stages:
  - {name: generate, uses: generate, on: srv}
  - {name: reward, uses: text2sql_reward, on: rw}
  - {name: old_log_prob, uses: old_log_prob, on: srv}
  - {name: advantage, uses: grpo_advantage, on: driver}
  - {name: update_actor, uses: update_actor, on: srv}
  - {name: sync_weights, uses: sync_weights, on: srv}
"""


def test_minimal_and_remote_pipelines_are_valid(project_dir):
    assert load_text(project_dir, MINIMAL).spec.name == "tiny"
    assert load_text(project_dir, REMOTE).spec.resources["srv"].type == "remote"


def test_generate_on_another_local_pool_is_a_supported_cross_pool_sync(project_dir):
    text = MINIMAL.replace("  rw: {type: cpu}\n", "  rw: {type: cpu}\n  rollout: {type: local, device: cpu}\n")
    text = text.replace("{name: generate, uses: generate, on: pool}", "{name: generate, uses: generate, on: rollout}")
    assert load_text(project_dir, text).spec.stage("generate").on == "rollout"


@pytest.mark.parametrize(
    "generate_on, expected",
    [
        (
            "pool",
            "11:42: stages[0].on: generate runs on local pool 'pool' but update_actor trains on remote backend "
            "'srv', so the new weights cannot reach this rollout: a remote backend syncs weights only within itself "
            "(run generate on 'srv')",
        ),
        (
            "other",
            "11:42: stages[0].on: generate runs on remote backend 'other' but update_actor trains on remote backend "
            "'srv', so the new weights cannot reach this rollout",
        ),
    ],
)
def test_weights_must_reach_the_rollout(generate_on, expected, project_dir):
    problems = problems_of(project_dir, REMOTE.replace("uses: generate, on: srv", f"uses: generate, on: {generate_on}"))
    assert any(p.startswith(expected) for p in problems), problems


def _actor_local_rollout_remote() -> str:
    text = REMOTE
    for stage in ("old_log_prob", "update_actor", "sync_weights"):
        text = text.replace(f"uses: {stage}, on: srv", f"uses: {stage}, on: pool")
    return text


def test_generate_on_a_backend_that_takes_weights_with_the_actor_local_is_valid(project_dir):
    spec = load_text(project_dir, _actor_local_rollout_remote()).spec
    assert (spec.stage("generate").on, spec.stage("update_actor").on) == ("srv", "pool")


def test_a_backend_that_cannot_take_weights_is_refused_with_one_line(project_dir, monkeypatch):
    from rlflow.backends.remote.reference import ReferenceBackend

    monkeypatch.setattr(ReferenceBackend, "accepts_rollout_weights", False)
    assert problems_of(project_dir, _actor_local_rollout_remote()) == [
        "11:42: stages[0].on: generate runs on remote backend 'srv' but update_actor trains on local pool 'pool', "
        "so the new weights cannot reach this rollout: remote backend 'reference' cannot take weights from a local "
        "actor (no accepts_rollout_weights) (run generate on 'pool', or both on local pools)"
    ]


def test_validation_rollout_follows_the_same_rule(project_dir):
    text = REMOTE + "  - {name: validate, uses: validate, on: other}\n"
    problems = problems_of(project_dir, text)
    assert any(p.startswith("17:42: stages[6].on: validate runs on remote backend 'other'") for p in problems), problems


def test_sync_weights_runs_where_the_actor_trains(project_dir):
    text = REMOTE.replace("uses: sync_weights, on: srv", "uses: sync_weights, on: other")
    assert problems_of(project_dir, text) == [
        "16:50: stages[5].on: sync_weights runs on 'other' but update_actor trains on 'srv'; weights are synced "
        "from where the actor trains (set on: srv)"
    ]


def test_kl_in_reward_needs_a_reference_too(project_dir):
    text = MINIMAL.replace("algorithm: {n: 4}", "algorithm: {n: 4, use_kl_in_reward: true, use_kl_loss: true}")
    problems = problems_of(project_dir, text)
    assert problems[0].startswith(
        "3:56: algorithm.use_kl_loss: use_kl_loss and use_kl_in_reward are true, "
        "but no stage computes reference log-probs"
    )


def test_data_parallel_size_uses_the_update_resource_and_generate_n(project_dir):
    two = MINIMAL.replace("pool: {type: local, device: cpu}", "pool: {type: local, device: cpu, gpus_per_node: 2}")
    assert load_text(project_dir, two).spec  # 4 x 4 = 16 samples over 2 workers
    odd = two.replace("algorithm: {n: 4}", "algorithm: {n: 3}")
    odd = odd.replace("ppo_mini_batch_size: 4", "ppo_mini_batch_size: 1")
    odd = odd.replace("train_batch_size: 8", "train_batch_size: 3")
    assert any(
        "ppo_mini_batch_size 1 x n 3 = 3 samples does not split evenly over the 2 data-parallel workers" in p
        for p in problems_of(project_dir, odd)
    )
    fixed = odd.replace(
        "{name: generate, uses: generate, on: pool}", "{name: generate, uses: generate, on: pool, with: {n: 2}}"
    )
    assert load_text(project_dir, fixed).spec  # the generate stage's own n decides
    remote = REMOTE.replace("algorithm: {n: 4}", "algorithm: {n: 3}").replace(
        "ppo_mini_batch_size: 4", "ppo_mini_batch_size: 1"
    )
    assert load_text(project_dir, remote.replace("train_batch_size: 8", "train_batch_size: 3")).spec  # remote: dp 1


@pytest.mark.parametrize(
    "nodes, pool, expected",
    [
        (
            [{"name": "a", "gpus": 8, "cpus": 64}, {"name": "b", "gpus": 8, "cpus": 64}],
            "{type: local, device: gpu, gpus_per_node: 8, nnodes: 2}",
            None,
        ),
        (
            [{"name": "a", "gpus": 8, "cpus": 64}, {"name": "b", "gpus": 4, "cpus": 64}],
            "{type: local, device: auto, gpus_per_node: 8, nnodes: 2}",
            "6:52: resources.pool.gpus_per_node: pool pool wants 8 GPUs on each of 2 nodes; a has 8, b has 4",
        ),
        (
            [{"name": "a", "cpus": 64}],
            "{type: local, device: auto, gpus_per_node: 2, nnodes: 2}",
            "6:63: resources.pool.nnodes: pool pool wants 2 nodes; the inventory has 1 (set nnodes: 1 or fewer)",
        ),
        (
            [{"name": "a", "cpus": 4}],
            "{type: local, device: cpu, cpus_per_worker: 6}",
            "6:53: resources.pool.cpus_per_worker: each actor of pool wants 6 CPUs; the largest node (a) has 4",
        ),
        (  # pinned by labels: only the labelled node counts, and it has too few GPUs
            [{"name": "a", "gpus": 8, "cpus": 64}, {"name": "b", "gpus": 4, "cpus": 64, "labels": {"zone": "east"}}],
            "{type: local, device: gpu, gpus_per_node: 8, label_selector: {zone: east}}",
            "6:51: resources.pool.gpus_per_node: pool pool wants 8 GPUs on 1 node labelled zone=east; b has 4",
        ),
        (
            [{"name": "a", "cpus": 8}],
            "{type: local, device: cpu, label_selector: {role: trainer}}",
            "6:52: resources.pool.label_selector: pool pool selects nodes labelled role=trainer; no inventory node",
        ),
        (
            [{"name": "a", "cpus": 8, "resources": {"slot": 1}}, {"name": "b", "cpus": 8}],
            "{type: local, device: cpu, nnodes: 2, resources: {slot: 1}}",
            "6:58: resources.pool.resources: pool pool wants 1 of resource 'slot' on each of 2 nodes; a has 1, b has 0",
        ),
        (
            [{"name": "a", "cpus": 8, "labels": {"role": "trainer"}, "resources": {"slot": 2}}],
            "{type: local, device: cpu, gpus_per_node: 2, resources: {slot: 1}, label_selector: {role: trainer}}",
            None,
        ),
    ],
)
def test_inventory_fit(nodes, pool, expected, tmp_path, monkeypatch):
    write_project(tmp_path, {"inventory": {"nodes": nodes}})
    monkeypatch.chdir(tmp_path)
    text = MINIMAL.replace("{type: local, device: cpu}", pool)
    if expected is None:
        assert load_text(tmp_path, text).spec
    else:
        assert any(p.startswith(expected) for p in problems_of(tmp_path, text)), problems_of(tmp_path, text)


def test_plugin_stage_kinds_from_rlflow_yaml(tmp_path, monkeypatch):
    (tmp_path / "my_reward_kinds.py").write_text(
        "from rlflow.stages.base import StageKind\n"
        "from rlflow.stages.registry import register_stage\n"
        "@register_stage\n"
        "class Judge(StageKind):\n"
        "    name = 'test_judge_reward'\n"
        "    role = 'reward'\n"
        "    verl_timer = 'reward'\n"
        "    reads_fields = ('response_text',)\n"
        "    writes_fields = ('token_level_scores', 'scores')\n"
        "    allowed_on = frozenset({'cpu'})\n"
        "    @classmethod\n"
        "    def check(cls, pipeline, stage):\n"
        "        return [('with', 'judges need a rubric')] if pipeline.name == 'strict' else []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    write_project(tmp_path, {"plugins": ["my_reward_kinds"]})
    monkeypatch.chdir(tmp_path)
    try:
        text = MINIMAL.replace("uses: text2sql_reward", "uses: test_judge_reward")
        assert load_text(tmp_path, text).spec.stage("reward").uses == "test_judge_reward"
        assert problems_of(tmp_path, text.replace("name: tiny", "name: strict")) == [
            "10:5: stages[1].with: judges need a rubric"
        ]
    finally:
        STAGE_KINDS.unregister("test_judge_reward")
        sys.modules.pop("my_reward_kinds", None)


def test_a_plugin_that_fails_to_import_is_positioned_in_rlflow_yaml(tmp_path, monkeypatch):
    write_project(tmp_path, {"plugins": ["no_such_module_for_rlflow_tests"]})
    monkeypatch.chdir(tmp_path)
    from rlflow.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, MINIMAL)
    (d,) = info.value.diagnostics
    assert d.file == "rlflow.yaml" and d.path == "plugins[0]"
    assert "plugin module 'no_such_module_for_rlflow_tests' failed to import" in d.message


VERL = MINIMAL.replace("data: {train: data/train.json}", "data: {format: verl, train: data/train.parquet}")


def test_verl_data_takes_no_databases_or_prompt_template(project_dir, rows_reward):
    text = VERL.replace("uses: text2sql_reward", f"uses: {rows_reward}")
    assert load_text(project_dir, text).spec.data.format == "verl"
    both = text.replace(
        "train: data/train.parquet}", "train: data/train.parquet, databases: dbs, prompt_template: t.j2}"
    )
    assert problems_of(project_dir, both) == [
        "2:49: data.databases: data.format verl does not use data.databases (the databases of text-to-SQL records): "
        "its rows bring their own prompts, rendered by the tokenizer's chat template "
        "(remove data.databases, or use a text-to-SQL format (bird, jsonl, parquet))",
        "2:65: data.prompt_template: data.format verl does not use data.prompt_template (the template that renders "
        "a text-to-SQL question): its rows bring their own prompts, rendered by the tokenizer's chat template "
        "(remove data.prompt_template, or use a text-to-SQL format (bird, jsonl, parquet))",
    ]


def test_text2sql_reward_needs_text_to_sql_rows(project_dir):
    assert problems_of(project_dir, VERL) == [
        "10:26: stages[1].uses: text2sql_reward scores SQL on the databases of text-to-SQL records, but data.format "
        "is verl, whose rows have none; use a reward for that data, or a text-to-SQL format (bird, jsonl, parquet)"
    ]


@pytest.mark.parametrize(
    "algorithm, warned, fix",
    [
        (
            "clip_ratio: 0.3",
            "clip_ratio 0.3 is ignored, as in verl",
            "set clip_ratio_low: 0.3 and clip_ratio_high: 0.3",
        ),
        ("clip_ratio: 0.3, clip_ratio_low: 0.1, clip_ratio_high: 0.28", "= [1 - 0.1, 1 + 0.28]", "remove clip_ratio"),
        ("clip_ratio: 0.3, clip_ratio_high: null", None, None),  # the upper bound is clip_ratio
        ("clip_ratio: 0.2", None, None),  # equal to both bounds: nothing is lost
        ("clip_ratio_low: 0.2, clip_ratio_high: 0.28", None, None),  # DAPO's clip-higher, written as in verl
        # DAPO as import-verl writes it (every resolved value): clip_ratio is the lower bound
        ("clip_ratio: 0.2, clip_ratio_low: 0.2, clip_ratio_high: 0.28", None, None),
    ],
)
def test_a_clip_ratio_that_verl_ignores_is_a_warning(project_dir, algorithm, warned, fix):
    loaded = load_text(project_dir, MINIMAL.replace("algorithm: {n: 4}", f"algorithm: {{n: 4, {algorithm}}}"))
    if warned is None:
        assert loaded.warnings == ()
        return
    (warning,) = loaded.warnings
    assert (warning.line, warning.path) == (3, "algorithm.clip_ratio") and warned in warning.message
    assert warning.fix.startswith(fix)


def test_a_clip_ratio_warning_never_undoes_clip_higher(project_dir):
    """Whatever the bounds, the advice never sets clip_ratio_high to the lower bound's value."""
    text = "clip_ratio: 0.25, clip_ratio_low: 0.2, clip_ratio_high: 0.28"
    (warning,) = load_text(project_dir, MINIMAL.replace("algorithm: {n: 4}", f"algorithm: {{n: 4, {text}}}")).warnings
    assert "clip_ratio_high: 0." not in warning.fix and "clip_ratio_low: 0." not in warning.fix


def test_a_clip_ratio_warning_names_the_set_that_made_it(project_dir):
    (warning,) = load_text(project_dir, MINIMAL, sets=["algorithm.clip_ratio=0.25"]).warnings
    assert warning.message.startswith("--set algorithm.clip_ratio=0.25: clip_ratio 0.25 is ignored")


@pytest.mark.parametrize(
    "sets, warned",
    [
        (
            ["trainer.use_dynamic_bsz=true", "trainer.ppo_max_token_len_per_gpu=100"],
            "trainer.ppo_max_token_len_per_gpu",
        ),
        (["trainer.ppo_max_token_len_per_gpu=100"], None),  # no token budget in use
        (
            ["trainer.log_prob_use_dynamic_bsz=true", "trainer.log_prob_max_token_len_per_gpu=100"],
            "trainer.log_prob_max_token_len_per_gpu",
        ),
        (["trainer.use_dynamic_bsz=true", "trainer.ppo_max_token_len_per_gpu=4096"], None),
    ],
)
def test_a_token_budget_below_the_longest_row_is_a_warning(project_dir, sets, warned):
    loaded = load_text(project_dir, MINIMAL, sets=sets)
    if warned is None:
        assert loaded.warnings == ()
        return
    (warning,) = loaded.warnings
    assert warning.path == warned and "gets a micro-batch of its own (verl refuses this budget)" in warning.message
    assert warning.fix.startswith(f"set {warned.split('.')[1]} to at least ")


def test_a_batch_not_a_multiple_of_the_mini_batch_is_a_warning_as_verl_runs_it(project_dir):
    """verl's run_qwen3-1.7b.sh (1024 / 80) in small: verl pads the last mini-batch, rlflow runs it shorter."""
    text = MINIMAL.replace("ppo_mini_batch_size: 4}", "ppo_mini_batch_size: 3}")
    loaded = load_text(project_dir, text)
    (warning,) = loaded.warnings
    assert warning.path == "trainer.ppo_mini_batch_size"
    assert "each epoch of an update takes 2 mini-batches of 3 prompts and a last one of 2" in warning.message
    assert warning.fix == "for mini-batches of one size, use a divisor of 8, such as 2"


ASYNC = MINIMAL.replace("  rw: {type: cpu}\n", "  rw: {type: cpu}\n  rollout: {type: local, device: cpu}\n").replace(
    "{name: generate, uses: generate, on: pool}", "{name: generate, uses: generate, on: rollout}"
)


@pytest.mark.parametrize(
    ("strategy", "cost"),
    [
        ("drop", "each step generates two batches and waits for the second"),
        ("wait", "the rollout samples nothing ahead: each step waits for its whole batch"),
    ],
)
def test_separate_async_with_threshold_one_warns_with_its_cost(project_dir, strategy, cost):
    sets = ["trainer.trainer_mode=separate_async", "trainer.max_off_policy_threshold=1"]
    (warning,) = load_text(project_dir, ASYNC, sets=[*sets, f"trainer.max_off_policy_strategy={strategy}"]).warnings
    assert warning.path == "trainer.max_off_policy_threshold" and cost in warning.message
    assert warning.fix == "set max_off_policy_threshold: 2 (one step stale) or more, or trainer_mode: sync"
    assert load_text(project_dir, ASYNC, sets=[sets[0], "trainer.max_off_policy_threshold=2"]).warnings == ()
    assert load_text(project_dir, ASYNC, sets=["trainer.max_off_policy_threshold=1"]).warnings == (), "sync: unused"
