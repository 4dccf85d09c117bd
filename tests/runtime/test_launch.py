"""``rlflow run`` compares its plan with verl's step before Ray starts: one warning per difference, and it trains on."""

from __future__ import annotations

import sys

from runtime_helpers import REPO, read_jsonl, rlflow, small_sets

sys.path.insert(0, str(REPO / "tests" / "check"))  # verl_copy: an editable copy of verl's trainer

from verl_copy import VerlCopy  # noqa: E402

ONE_STEP = ("trainer.total_steps=1", "trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.val_before_train=false")


def test_run_warns_about_a_changed_verl_and_trains_on(tmp_path):
    changed = VerlCopy(tmp_path / "verl_src").unwrap_if("trainer_base.py", "self.use_reference_policy")
    run_dir = tmp_path / "run"
    result = rlflow(
        "run",
        str(REPO / "pipelines" / "bird_grpo.yaml"),
        "--run-dir",
        str(run_dir),
        *small_sets(*ONE_STEP),
        env={"RLFLOW_VERL_SOURCE": str(changed.root)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [warning] = [line for line in result.stderr.splitlines() if "verl order" in line]
    assert warning.startswith("[rlflow] verl order: verl `ref` (trainer_base.py:")
    assert "'ref_log_prob' (ref_log_prob): verl no longer runs it under `if self.use_reference_policy`" in warning
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1]
