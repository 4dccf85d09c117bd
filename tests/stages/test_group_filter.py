"""group_filter on real tensors: which groups stay, row order, every field filtered, metrics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.stages.base import StageContext
from rlflow.stages.group_filter import GroupFilter, group_ids, group_std
from rlflow.stages.registry import get_stage_kind

run_group_filter = GroupFilter().run


def context(**config) -> StageContext:
    return StageContext(pipeline=None, config=GroupFilter.parse_config(config), stage_name="keep_varied")


def batch(scores: list[float], uids: list[str]) -> Batch:
    rows = len(scores)
    return Batch(
        {"scores": torch.tensor(scores), "responses": torch.arange(rows * 3).reshape(rows, 3)},
        {"uid": uids, "response_text": [f"r{i}" for i in range(rows)]},
        {"reward/mean": 0.5},
    )


def test_drops_groups_whose_scores_do_not_vary():
    out = run_group_filter(batch([1, 1, 0, 1, 0, 0, 1, 1], ["a", "a", "b", "b", "c", "c", "d", "d"]), context())
    assert out["uid"] == ["b", "b"]
    assert out["response_text"] == ["r2", "r3"]
    assert torch.equal(out["responses"], torch.tensor([[6, 7, 8], [9, 10, 11]]))
    assert torch.equal(out["scores"], torch.tensor([0.0, 1.0]))
    assert out.metrics == {"reward/mean": 0.5, "filter/kept_groups": 1.0, "filter/dropped_groups": 3.0,
                           "filter/kept_ratio": 0.25}  # fmt: skip


def test_interleaved_groups_keep_their_row_order():
    out = run_group_filter(batch([0, 0, 1, 0.5, 0, 1], ["a", "b", "a", "b", "c", "c"]), context(keep_at_least=0))
    assert out["uid"] == ["a", "b", "a", "b", "c", "c"]
    out = run_group_filter(batch([0, 0, 1, 0, 0, 1], ["a", "b", "a", "b", "c", "c"]), context(keep_at_least=0))
    assert out["uid"] == ["a", "a", "c", "c"] and out["response_text"] == ["r0", "r2", "r4", "r5"]


def test_min_std_is_a_strict_threshold_and_singletons_stay():
    scores, uids = [0, 1, 0, 0.25, 0.7], ["a", "a", "b", "b", "solo"]  # std a = 0.5, b = 0.125 (exact in binary)
    assert run_group_filter(batch(scores, uids), context(min_std=0.124, keep_at_least=0))["uid"] == uids
    assert run_group_filter(batch(scores, uids), context(min_std=0.125, keep_at_least=0))["uid"] == ["a", "a", "solo"]
    assert run_group_filter(batch(scores, uids), context(min_std=0.5, keep_at_least=0))["uid"] == ["solo"]


def test_keep_at_least_takes_back_the_most_varied_groups():
    scores, uids = [0, 0.5, 0, 0, 0, 0.25, 1, 1], ["a", "a", "b", "b", "c", "c", "d", "d"]
    out = run_group_filter(batch(scores, uids), context(min_std=0.5, keep_at_least=2))
    assert out["uid"] == ["a", "a", "c", "c"]  # a (std 0.25) then c (0.125); b and d tie at 0
    assert out.metrics["filter/kept_groups"] == 2.0 and out.metrics["filter/kept_ratio"] == 0.5
    everything = run_group_filter(batch(scores, uids), context(min_std=0.5, keep_at_least=10))
    assert everything["uid"] == uids and everything.metrics["filter/dropped_groups"] == 0.0


def test_group_std_matches_numpy_population_std():
    generator = torch.Generator().manual_seed(0)
    scores = torch.rand(64, generator=generator)
    uids = [f"g{int(i)}" for i in torch.randint(0, 9, (64,), generator=generator)]
    ids, groups = group_ids(uids)
    std, count = group_std(scores, ids, groups)
    for uid, gid in dict(zip(uids, ids.tolist())).items():
        values = scores.numpy()[[i for i, u in enumerate(uids) if u == uid]]
        assert std[gid].item() == pytest.approx(float(np.std(values)), abs=1e-6)
        assert count[gid].item() == len(values)


def test_empty_batch():
    out = run_group_filter(Batch({"scores": torch.zeros(0)}, {"uid": []}), context())
    assert len(out) == 0
    assert out.metrics == {"filter/kept_groups": 0.0, "filter/dropped_groups": 0.0, "filter/kept_ratio": 1.0}


def test_missing_fields_name_the_stage():
    with pytest.raises(StageError, match="keep_varied.*needs batch field 'scores'"):
        run_group_filter(Batch({}, {"uid": ["a"]}), context())


def test_the_registered_kind_runs_the_filter():
    kind = get_stage_kind("group_filter")
    out = kind().run(batch([1, 0, 1, 1], ["a", "a", "b", "b"]), context())
    assert out["uid"] == ["a", "a"]
    assert kind.reads_fields == ("scores", "uid") and kind.changes_rows
