"""verl values as rlflow values, one converter at a time (a recording context stands in for the converter)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rlflow.importers.verl_config import VerlConfig
from rlflow.importers.verl_values import SKIP, Unsupported, convert_value, show


@dataclass
class Recorder:
    values: dict = field(default_factory=dict)
    gpus: int = 8
    changes: list = field(default_factory=list)

    @property
    def cfg(self) -> VerlConfig:
        return VerlConfig("test", self.values, {}, frozenset())

    def changed(self, line: str) -> None:
        self.changes.append(line)

    def workers(self) -> int:
        return self.gpus


def test_a_global_size_is_divided_by_the_workers_and_said_so():
    ctx = Recorder()
    assert convert_value("actor_rollout_ref.actor.ppo_micro_batch_size", 64, ctx) == 8
    assert ctx.changes == [
        "actor_rollout_ref.actor.ppo_micro_batch_size=64: verl's deprecated global size over 8 workers: "
        "trainer.ppo_micro_batch_size_per_gpu 8"
    ]
    assert convert_value("actor_rollout_ref.actor.ppo_micro_batch_size", None, ctx) is SKIP


def test_warm_up_from_verls_ratio_needs_the_number_of_steps():
    key = "actor_rollout_ref.actor.optim.lr_warmup_steps"
    ratio = {"actor_rollout_ref": {"actor": {"optim": {"lr_warmup_steps_ratio": 0.1}}}}
    assert convert_value(key, 5, Recorder()) == 5
    assert convert_value(key, -1, Recorder()) == 0, "no ratio: no warm-up"
    assert convert_value(key, -1, Recorder({**ratio, "trainer": {"total_training_steps": 50}})) == 5
    with pytest.raises(Unsupported, match="needs trainer.total_training_steps"):
        convert_value(key, -1, Recorder(ratio))


def test_names_and_dtypes_map_case_blind_and_refuse_what_rlflow_lacks():
    assert convert_value("actor_rollout_ref.actor.optim.optimizer", "AdamW", Recorder()) == "adamw"
    assert convert_value("actor_rollout_ref.actor.fsdp_config.model_dtype", "bf16", Recorder()) == "bfloat16"
    with pytest.raises(Unsupported, match="rlflow has no optimizer 'Muon'"):
        convert_value("actor_rollout_ref.actor.optim.optimizer", "Muon", Recorder())
    assert convert_value("actor_rollout_ref.actor.strategy", "fsdp2", Recorder()) == "torch"
    with pytest.raises(Unsupported):
        convert_value("actor_rollout_ref.actor.strategy", "megatron", Recorder())


def test_an_unset_rollout_name_is_the_torch_rollout():
    ctx = Recorder()
    assert convert_value("actor_rollout_ref.rollout.name", "???", ctx) is SKIP
    assert ctx.changes == ["actor_rollout_ref.rollout.name is not set (verl requires it): the torch rollout"]


def test_nulls_give_no_value_except_where_verl_means_something_by_them():
    assert convert_value("trainer.total_training_steps", None, Recorder()) is SKIP
    assert convert_value("data.train_max_samples", -1, Recorder()) is SKIP
    assert convert_value("actor_rollout_ref.actor.clip_ratio_low", None, Recorder()) is None


def test_several_files_keep_the_first_and_say_so():
    ctx = Recorder()
    assert convert_value("data.val_files", ["a.parquet", "b.parquet"], ctx) == "a.parquet"
    assert ctx.changes[0].startswith('data.val_files=["a.parquet", "b.parquet"]: rlflow reads one file per split')
    assert show("text") == "text" and show([1, True]) == "[1, true]"
