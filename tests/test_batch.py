"""Batch: rows of torch tensors or numpy arrays, the round trip between them, and no torch at import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from rlflow.batch import Batch


def rows(n: int = 4) -> Batch:
    return Batch(
        {"response_mask": torch.arange(n * 3).reshape(n, 3), "scores": torch.linspace(0, 1, n)},
        {"uid": [f"u{i}" for i in range(n)]},
        {"m": 1.0},
    )


def test_importing_batch_leaves_torch_unloaded():
    code = "import sys, rlflow.batch; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_numpy_round_trip_keeps_values_dtypes_lists_and_metrics():
    batch = rows()
    as_numpy = batch.to_numpy()
    assert all(isinstance(v, np.ndarray) for v in as_numpy.tensors.values())
    assert as_numpy["response_mask"].dtype == np.int64 and as_numpy["scores"].dtype == np.float32
    back = as_numpy.to_torch()
    for key in batch.tensors:
        assert torch.equal(back[key], batch[key]) and back[key].dtype == batch[key].dtype
    assert back["uid"] == batch["uid"] and back.metrics == {"m": 1.0}


def test_read_only_arrays_become_tensors_of_their_own():
    array = np.ones((2, 3), dtype=np.float32)
    array.flags.writeable = False  # as Ray hands arrays over from its object store
    tensor = Batch({"x": array}).to_torch()["x"]
    tensor[0, 0] = 5.0
    assert array[0, 0] == 1.0 and tensor.dtype == torch.float32


def test_a_numpy_batch_splits_indexes_and_concatenates_like_a_torch_one():
    batch, as_numpy = rows(5), rows(5).to_numpy()
    numpy_shards, torch_shards = as_numpy.split(2), batch.split(2)
    assert [len(s) for s in numpy_shards] == [len(s) for s in torch_shards] == [2, 3]
    joined = Batch.concat(numpy_shards)
    assert isinstance(joined["scores"], np.ndarray)
    assert np.array_equal(joined["response_mask"], batch["response_mask"].numpy())
    picked = as_numpy.index(np.array([4, 0]))
    assert picked["uid"] == ["u4", "u0"] and picked["response_mask"].tolist() == [[12, 13, 14], [0, 1, 2]]
    picked["scores"][0] = 9.0
    assert as_numpy["scores"][4] != 9.0, "index copies"


def test_setting_an_array_makes_it_a_tensor_field():
    batch = rows(2).to_numpy()
    batch["token_level_scores"] = np.zeros((2, 3), dtype=np.float32)
    assert "token_level_scores" in batch.tensors
    with pytest.raises(ValueError, match="disagree on the number of rows"):
        batch["bad"] = np.zeros(3)
