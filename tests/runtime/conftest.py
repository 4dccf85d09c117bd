"""Fixtures of the runtime tests (helpers live in runtime_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlflow.assets import BIRD_SAMPLE


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    """A project folder whose rlflow.yaml loads the fault plugins and points at the repo's sample."""
    (tmp_path / "rlflow.yaml").write_text(
        "vars:\n"
        "  model_path: builtin:tiny-qwen2\n"
        f"  bird_root: {BIRD_SAMPLE}\n"
        "plugins: [rlflow_test_faults]\n"
        "runs_dir: runs\n"
    )
    return tmp_path


@pytest.fixture
def one_torch_thread():
    """One torch thread in this process while the test runs (in-process runs are compared bit for bit)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
