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
