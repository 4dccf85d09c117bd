"""Atomic checkpoints: complete ones are visible, partial ones never are, old ones are dropped."""

import json
import os
import time

import pytest

from rlflow.errors import ResumeError
from rlflow.runtime import checkpoints as ck


def _write(tmp, step, keep=2):
    part = ck.begin(tmp, step)
    (part / "rank_0").mkdir()
    (part / "rank_0" / "model.bin").write_bytes(b"w" * 10)
    return ck.commit(tmp, part, step, {"global_step": step, "sampler": {"pos": step}}, keep)


def test_commit_is_visible_and_keeps_last_k(tmp_path):
    for step in (1, 2, 3):
        _write(tmp_path, step, keep=2)
    assert [p.name for p in ck.complete_checkpoints(tmp_path)] == ["step_2", "step_3"]
    assert ck.read_state(ck.latest(tmp_path))["global_step"] == 3


def test_partial_checkpoint_is_ignored_and_swept(tmp_path):
    _write(tmp_path, 1)
    part = ck.begin(tmp_path, 2)  # a crash right here leaves only the temporary directory
    (part / "rank_0").mkdir()
    assert ck.latest(tmp_path).name == "step_1"
    assert ck.sweep_partial(tmp_path) == [part.name]
    assert not part.exists()


def test_directory_without_state_is_not_complete(tmp_path):
    (tmp_path / "step_5").mkdir()
    assert ck.latest(tmp_path) is None


def test_pipeline_differences_name_the_fields_and_allow_length_knobs():
    old = "trainer: {train_batch_size: 16, total_steps: 4}\nmodel: {path: a}\n"
    new = "trainer: {train_batch_size: 8, total_steps: 10}\nmodel: {path: b}\n"
    diffs = ck.pipeline_differences(old, new)
    assert diffs == ["model.path: 'a' -> 'b'", "trainer.train_batch_size: 16 -> 8"]
    with pytest.raises(ResumeError, match="train_batch_size: 16 -> 8.*--force"):
        ck.check_resumable(old, new, force=False)
    ck.check_resumable(old, new, force=True)
    ck.check_resumable(old, "trainer: {train_batch_size: 16, total_steps: 9}\nmodel: {path: a}\n", force=False)


def test_state_file_is_json(tmp_path):
    final = _write(tmp_path, 7)
    assert json.loads((final / ck.STATE_FILE).read_text())["sampler"] == {"pos": 7}


def test_a_damaged_resolved_pipeline_stops_a_resume_in_one_line(tmp_path):
    os.mkfifo(tmp_path / "pipeline.resolved.yaml")
    with pytest.raises(ResumeError, match="pipeline.resolved.yaml:1:1: cannot read the checkpoint's pipeline: a FIFO"):
        ck.read_resolved(tmp_path)
    bomb = "".join(
        f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}" if i else "x"] * 10) + "]\n" for i in range(10)
    )  # compared as it stands, 10^10 nodes
    start = time.monotonic()
    with pytest.raises(ResumeError, match="alias bomb"):
        ck.pipeline_differences(bomb, "name: x\n")
    assert time.monotonic() - start < 5
