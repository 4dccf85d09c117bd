"""Helpers of the remote-backend tests: a tiny main_config, server handles, a dropping TCP proxy.

Test modules import these from here (not from conftest: test folders share one sys.path).
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from rlflow.schemas.pipeline import Pipeline

HERE = Path(__file__).parent
TOKEN = "test-token-0123456789"


def make_main_config(root: Path, *, run_dir: Path | None = None, **backend_config) -> dict:
    pipeline = Pipeline.model_validate(
        {
            "name": "remote-test",
            "data": {"train": "train.json", "max_prompt_length": 16, "max_response_length": 8},
            "algorithm": {"n": 2},
            "trainer": {"train_batch_size": 2, "ppo_mini_batch_size": 2},
            "resources": {"arctic": {"type": "remote", "backend": "reference", "config": backend_config}},
            "stages": [{"name": "generate", "uses": "generate", "on": "arctic"}],
        }
    )
    return {
        "pipeline": pipeline.model_dump(by_alias=True, mode="json"),
        "resource": "arctic",
        "backend_config": dict(backend_config),
        "project_root": str(root),
        "run_dir": None if run_dir is None else str(run_dir),
    }


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
