"""Suite-wide test policy: ``gpu`` tests are opt-in (``RLFLOW_TEST_GPU=1`` on a machine with a CUDA GPU)."""

from __future__ import annotations

import os

import pytest


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is None:
        return
    if os.environ.get("RLFLOW_TEST_GPU") != "1":
        pytest.skip("opt-in: RLFLOW_TEST_GPU=1 on a machine with a CUDA GPU")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("RLFLOW_TEST_GPU=1, but torch sees no CUDA GPU")


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB filesystem (a tmpfs; mounting needs root): a full disk for what writes more than that."""
    import subprocess

    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)
