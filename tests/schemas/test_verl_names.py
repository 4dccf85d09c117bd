"""The verl name table: lookups, the hints errors show, and docs/verl.md showing the table as it is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from schema_helpers import MINIMAL, problems_of

from rlflow.schemas.pipeline import Pipeline
from rlflow.schemas.schema_errors import walk
from rlflow.schemas.verl_names import BY_VERL, VERL_NAMES, WITHOUT_COUNTERPART, lookup, verl_key_hints, why_not

DOC = Path(__file__).resolve().parents[2] / "docs" / "verl.md"


def test_every_field_target_is_a_field_of_the_pipeline_format():
    for name in VERL_NAMES:
        if name.place == "field":
            assert walk(Pipeline, tuple(name.rlflow.split("."))) is not None, name


def test_every_stage_and_pool_target_is_a_key_of_that_kind_or_pool():
    from rlflow.schemas.pipeline import CpuPool, LocalPool
    from rlflow.stages import STAGE_KINDS

    pools = {"local": LocalPool, "cpu": CpuPool}
    for name in VERL_NAMES:
        if name.place == "stage":
            model = STAGE_KINDS.get(name.owner).config_model
            *parents, leaf = name.rlflow.split(".")  # a nested setting: overlong_buffer.len
            for parent in parents:
                model = model.model_fields[parent].annotation
            assert leaf in model.model_fields, name
        elif name.place == "pool":
            assert name.rlflow in pools[name.owner].model_fields, name


def test_each_verl_key_is_listed_once():
    keys = [name.verl for name in VERL_NAMES]
    assert len(keys) == len(set(keys)) == len(BY_VERL)


@pytest.mark.parametrize(
    "path, expected",
    [
        (
            ("actor_rollout_ref", "actor", "optim", "lr"),
            "verl's actor_rollout_ref.actor.optim.lr is rlflow's trainer.optim.lr",
        ),
        (("data", "train_files"), "verl's data.train_files is rlflow's data.train; one file: verl takes a list"),
        (("trainer", "total_training_steps"), "verl's trainer.total_training_steps is rlflow's trainer.total_steps"),
        (("algorithm", "kl_ctrl", "kl_coef"), "verl's algorithm.kl_ctrl.kl_coef is rlflow's algorithm.kl_coef"),
        # verl's last key written in the rlflow section that holds it
        (("trainer", "lr"), "verl's actor_rollout_ref.actor.optim.lr is rlflow's trainer.optim.lr"),
        (
            ("trainer", "ppo_micro_batch_size"),
            "verl's ppo_micro_batch_size is a deprecated global size; rlflow's "
            "trainer.ppo_micro_batch_size_per_gpu is per worker: verl's global size divided by the number of workers",
        ),
        (
            ("trainer", "log_prob_micro_batch_size"),
            "verl's log_prob_micro_batch_size is a deprecated global size; rlflow's "
            "trainer.log_prob_micro_batch_size_per_gpu is per worker",
        ),
        (("trainer", "logger"), "verl's trainer.logger is rlflow's logging.sinks in rlflow.yaml"),
        (
            ("actor_rollout_ref", "rollout", "temperature"),
            "verl's actor_rollout_ref.rollout.temperature is rlflow's with.temperature of the generate stage",
        ),
        (("trainer", "n_gpus_per_node"), "is rlflow's gpus_per_node of the local pool (resources)"),
        (("critic", "optim", "clip_grad"), "verl's critic.optim.clip_grad is rlflow's critic.grad_clip"),
        (
            ("critic", "ppo_micro_batch_size"),
            "rlflow's critic.ppo_micro_batch_size_per_gpu is per worker: verl's global size divided by",
        ),
        (
            ("critic", "forward_micro_batch_size_per_gpu"),
            "is rlflow's with.micro_batch_size of the compute_values stage",
        ),
    ],
)
def test_lookup_names_rlflows_counterpart(path, expected):
    name = lookup(path)
    assert name is not None and expected in name.hint(), name and name.hint()


@pytest.mark.parametrize(
    "path",
    [("data", "path"), ("trainer", "n"), ("trainer", "sedd"), ("algorithm",), ("stages", 0, "on"), ()],
)
def test_lookup_leaves_other_names_to_did_you_mean(path):
    """A verl leaf name counts only in the rlflow section that holds its counterpart: `data.path`
    is not verl's model.path, `trainer.n` is not algorithm.n."""
    assert lookup(path) is None


def test_a_pasted_verl_section_gets_one_hint_per_key():
    hints = dict(
        verl_key_hints(
            ("actor_rollout_ref",),
            {
                "actor": {"optim": {"lr": 1e-6}, "fsdp_config": {"param_offload": True}, "made_up": 1},
                "rollout": {"n": 5},
            },
        )
    )
    assert hints[("actor_rollout_ref", "actor", "optim", "lr")].endswith("is rlflow's trainer.optim.lr")
    assert hints[("actor_rollout_ref", "rollout", "n")].endswith("is rlflow's algorithm.n")
    offload = hints[("actor_rollout_ref", "actor", "fsdp_config", "param_offload")]
    assert offload.startswith("verl's actor_rollout_ref.actor.fsdp_config.param_offload has no rlflow counterpart: ")
    assert (
        hints[("actor_rollout_ref", "actor", "made_up")]
        == "rlflow has no counterpart of actor_rollout_ref.actor.made_up"
    )


def test_a_huge_paste_is_capped_and_points_at_import_verl():
    section = {"critic": {f"k{i}": i for i in range(30)}}
    hints = verl_key_hints(("critic",), section["critic"], limit=5)
    assert len(hints) == 6
    assert hints[0] == (("critic", "k0"), "rlflow has no counterpart of critic.k0")
    assert hints[-1] == (("critic",), "25 more keys under critic; `rlflow import-verl` converts a verl config")


def test_keys_that_are_not_verls_get_no_hint():
    assert verl_key_hints(("trainer", "sedd"), 3) is None
    assert verl_key_hints(("my_section",), {"a": 1}) is None


def test_why_not_takes_the_longest_prefix():
    assert why_not("critic.optim.lr") == "", "the critic's optimizer has its counterpart: critic.optim"
    assert why_not("critic.fsdp.param_offload").startswith("the critic is a whole replica per worker")
    assert why_not("critic.model.lora_rank") == "rlflow fine-tunes all weights (no LoRA)"
    assert "model.gradient_checkpointing" in why_not("critic.model.enable_gradient_checkpointing")
    assert "deepspeed" in why_not("actor_rollout_ref.actor.fsdp_config.param_offload")
    assert why_not("actor_rollout_ref.model.lora_rank") == "rlflow fine-tunes all weights (no LoRA)"
    assert why_not("trainer.nothing_like_it") == ""


def test_pipeline_path_finds_the_stage_and_pool_in_the_data():
    data = {
        "stages": [{"uses": "reward_function"}, {"uses": "generate"}],
        "resources": {"gpus": {"type": "local"}, "rw": {"type": "cpu"}},
    }
    assert BY_VERL["actor_rollout_ref.rollout.top_p"].pipeline_path(data) == "stages.1.with.top_p"
    assert BY_VERL["trainer.nnodes"].pipeline_path(data) == "resources.gpus.nnodes"
    assert BY_VERL["reward.num_workers"].pipeline_path(data) == "resources.rw.workers"
    assert BY_VERL["actor_rollout_ref.actor.optim.lr"].pipeline_path(data) == "trainer.optim.lr"
    assert BY_VERL["trainer.logger"].pipeline_path(data) is None
    assert BY_VERL["actor_rollout_ref.rollout.top_p"].pipeline_path({"stages": []}) is None


def test_a_verl_key_in_a_pipeline_is_answered_at_its_line(project_dir):
    text = MINIMAL.replace("trainer: {", "trainer: {total_training_steps: 3, ")
    problems = problems_of(project_dir, text)
    assert (
        "4:11: trainer.total_training_steps: unknown key 'total_training_steps' "
        "(verl's trainer.total_training_steps is rlflow's trainer.total_steps)"
    ) in problems


def test_the_set_of_a_global_size_explains_it(project_dir):
    problems = problems_of(project_dir, MINIMAL, ["trainer.ppo_micro_batch_size=64"])
    (line,) = [p for p in problems if "ppo_micro_batch_size" in p]
    assert (
        "--set trainer.ppo_micro_batch_size=64: unknown key 'ppo_micro_batch_size' (verl's ppo_micro_batch_size "
        in line
    )
    assert "write --set" not in line, "a global size is not the same number per worker"


def markdown_rows() -> list[str]:
    """The rows docs/verl.md shows: one per verl key, then one per key prefix without a counterpart."""

    def where(name) -> str:
        if name.place == "stage":
            return f"`with.{name.rlflow}` of the `{name.owner}` stage"
        if name.place == "pool":
            return f"`{name.rlflow}` of the `{name.owner}` pool"
        if name.place == "project":
            return f"`{name.rlflow}` in rlflow.yaml"
        return f"`{name.rlflow}`"

    def note(name) -> str:
        return "verl's deprecated global size; rlflow's is per worker" if name.global_size else name.note

    rows = ["| verl | rlflow | how it differs |", "|---|---|---|"]
    rows += [f"| `{n.verl}` | {where(n)} | {note(n)} |" for n in VERL_NAMES]
    rows += ["", "| verl (and keys under it) | why rlflow has no counterpart |", "|---|---|"]
    rows += [f"| `{prefix.rstrip('.')}` | {why} |" for prefix, why in WITHOUT_COUNTERPART]
    return rows


def test_the_doc_shows_the_table():
    text = DOC.read_text()
    block = re.search(r"<!-- verl-names -->\n(.*?)\n<!-- /verl-names -->", text, re.DOTALL)
    assert block, "docs/verl.md lost its <!-- verl-names --> block"
    expected = "\n".join(markdown_rows())
    assert block.group(1) == expected, "docs/verl.md's name table differs from rlflow.schemas.verl_names:\n" + expected


def test_the_set_of_a_verl_multi_turn_key_names_rlflows(project_dir):
    problems = problems_of(project_dir, MINIMAL, ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"])
    (line,) = [p for p in problems if "max_assistant_turns" in p]
    assert (
        "is rlflow's with.multi_turn.max_assistant_turns of the generate stage; "
        "write --set stages.0.with.multi_turn.max_assistant_turns=3"
    ) in line
    ignored = BY_VERL["actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode"]
    assert "accepted and ignored" in ignored.hint()
