"""Fixtures for the stage tests: one thread and a shared colocated engine (helpers: ``stage_helpers``)."""

from __future__ import annotations

import pytest
import torch
from stage_helpers import make_pipeline


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: on a small shared CPU, more threads only wait for each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def engine():
    """A colocated engine with a reference (KL loss on); tests that update build their own."""
    from rlflow.backends.local.local_engine import LocalEngine

    return LocalEngine(make_pipeline(algorithm={"use_kl_loss": True}, with_ref=True))
