"""Fixtures for the remote-backend tests: a tiny main_config, in-thread servers, a dropping proxy."""

from __future__ import annotations

import os

import pytest
from remote_helpers import HERE, TOKEN, DroppingProxy


@pytest.fixture
def fake_importable(monkeypatch):
    """Let server subprocesses import remote_fake_engine (an engine factory for the tests)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))


@pytest.fixture
def served():
    """A BackendServer over a FakeEngine, serving on a thread of this process."""
    from remote_fake_engine import FakeEngine

    from rlflow.backends.remote.server import BackendServer

    server = BackendServer(FakeEngine(), token=TOKEN, max_message_bytes=1 << 20).start_in_thread()
    yield server
    server.shutdown()


@pytest.fixture
def proxy(served):
    relay = DroppingProxy(served.port)
    yield relay
    relay.close()


EXAMPLE_PLUGIN = HERE.parents[2] / "examples" / "remote_backend_plugin"


@pytest.fixture(scope="session")
def example_plugin():
    """pip-install the example plugin (editable, no deps) so its entry point is really discovered.

    Done here rather than in the Makefile so that ``pytest`` alone works on a fresh checkout.
    The running interpreter then re-reads site-packages (for the editable finder) and the
    registry forgets that it already scanned the entry points.
    """
    import importlib
    import importlib.metadata
    import importlib.util
    import site
    import subprocess
    import sys
    import sysconfig

    from rlflow.backends.remote.registry import REMOTE_BACKENDS

    try:
        importlib.metadata.distribution("rlflow-example-backend")
    except importlib.metadata.PackageNotFoundError:
        # build with the venv's setuptools when it has one (no download); else pip's isolated build
        isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation, "-e", str(EXAMPLE_PLUGIN)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        site.addsitedir(sysconfig.get_paths()["purelib"])
        importlib.invalidate_caches()
    REMOTE_BACKENDS._entry_points_loaded = False  # rescan: the plugin may be newer than the last scan
    return "inproc_example"


@pytest.fixture(scope="class")
def one_torch_thread():
    """Tiny models on a shared CPU run far faster on one thread than on oversubscribed ones."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
