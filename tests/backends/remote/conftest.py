"""Fixtures for the remote-backend tests: a tiny main_config, in-thread servers, a dropping proxy."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from rlflow.schemas.pipeline import Pipeline

HERE = Path(__file__).parent
TOKEN = "test-token-0123456789"


def make_main_config(root: Path, **backend_config) -> dict:
    pipeline = Pipeline.model_validate({
        "name": "remote-test",
        "data": {"train": "train.json", "max_prompt_length": 16, "max_response_length": 8},
        "algorithm": {"n": 2},
        "trainer": {"train_batch_size": 2, "ppo_mini_batch_size": 2},
        "resources": {"arctic": {"type": "remote", "backend": "reference", "config": backend_config}},
        "stages": [{"name": "generate", "uses": "generate", "on": "arctic"}],
    })
    return {
        "pipeline": pipeline.model_dump(by_alias=True, mode="json"),
        "resource": "arctic",
        "backend_config": dict(backend_config),
        "project_root": str(root),
    }


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


def handle_of(server, **override) -> dict:
    return {**server.handle(), **override}


class DroppingProxy:
    """A TCP relay that can cut a connection right after the server starts answering.

    ``drop_next_reply()`` arms it: the next bytes the server sends are swallowed and both
    sides closed, exactly what a client sees when the network or the server drops mid-call.
    """

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.drops = 0
        self._armed = threading.Event()
        self._clients: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_next_reply(self) -> None:
        self._armed.set()

    def cut_clients(self) -> None:
        """Cut every open client-side connection now (the server side stays, still working)."""
        for sock in self._clients:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.drops += 1

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._clients.append(client)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_server: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_server and self._armed.is_set():
                    self._armed.clear()
                    self.drops += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()


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
            check=True, capture_output=True, timeout=300,
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
