"""Fixtures for the local-backend tests: one thread, the built-in tokenizer, a sharp model, prompts.

Sizes are kept very small (a handful of prompts, 8-16 response tokens) so every test runs in
a second or two on a shared CPU. Helpers live in ``local_helpers`` (a unique module name:
test folders share one ``sys.path``, so ``from conftest import`` could pick another folder's).
"""

from __future__ import annotations

import copy

import pytest
import torch
from local_helpers import PROMPTS, make_pipeline, sharpen  # noqa: F401  (re-exported for older imports)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: on a small shared CPU, more threads only wait for each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer():
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    return load_tokenizer(ModelSpec())


@pytest.fixture(scope="session")
def _sharp_model(tokenizer):
    from rlflow.backends.local.models import load_model
    from rlflow.schemas.pipeline import ModelSpec

    return sharpen(load_model(ModelSpec(), tokenizer, seed=1)).eval()


@pytest.fixture
def sharp_model(_sharp_model):
    """A peaked-logit tiny model (a fresh copy: tests may change it)."""
    return copy.deepcopy(_sharp_model)


@pytest.fixture(scope="session")
def prompt_batch(tokenizer):
    from rlflow.backends.local.models import build_prompt_batch

    return build_prompt_batch(tokenizer, PROMPTS, 32)
