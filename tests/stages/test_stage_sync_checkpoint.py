"""Stages ``sync_weights`` and ``save_checkpoint`` on a colocated engine."""

from __future__ import annotations

import pytest
from stage_helpers import make_pipeline

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.stages.base import StageContext
from rlflow.stages.save_checkpoint import SaveCheckpoint
from rlflow.stages.sync_weights import SyncWeights


def context(kind, engine, **kw) -> StageContext:
    return StageContext(
        pipeline=make_pipeline(), config=kind.parse_config({}), stage_name=kind.name, engine=engine, **kw
    )


def test_colocated_sync_reports_zero_bytes_and_sets_the_policy_version(engine):
    out = SyncWeights().run(Batch(), context(SyncWeights, engine, step=3))
    assert out.metrics["sync/bytes"] == 0.0 and out.metrics["sync/seconds"] >= 0.0
    assert engine.global_steps == 3


def test_save_checkpoint_writes_this_ranks_part(engine, tmp_path):
    SaveCheckpoint().run(Batch(), context(SaveCheckpoint, engine, step=2, run_dir=str(tmp_path)))
    assert (tmp_path / "checkpoints" / "step_2" / "rank_0" / "model" / "model.safetensors").exists()
    target = tmp_path / "elsewhere"
    SaveCheckpoint().run(Batch(), context(SaveCheckpoint, engine, step=2, checkpoint_dir=str(target)))
    assert (target / "rank_0" / "trainer.pt").exists()


def test_save_checkpoint_needs_somewhere_to_write(engine):
    with pytest.raises(StageError, match="no run directory"):
        SaveCheckpoint().run(Batch(), context(SaveCheckpoint, engine, step=2))
