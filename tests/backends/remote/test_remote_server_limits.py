"""The server under a crowd of slow peers, a flood of strangers and lying length prefixes: bounded threads and
memory, a real client served.

The server runs in its own process (a ``BackendServer`` over the fake engine), so its thread
count and resident memory can be read with psutil while the peers misbehave.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import msgpack
import psutil
import pytest
from remote_helpers import HERE, TOKEN

from rlflow.backends.remote import wire
from rlflow.backends.remote.client import BackendClient
from rlflow.errors import BackendError

_SERVER = """
import json, sys, threading
from remote_fake_engine import FakeEngine
from rlflow.backends.remote.server import BackendServer
server = BackendServer(FakeEngine(), token=sys.argv[1], **json.loads(sys.argv[2]))
print(json.dumps(server.handle()), flush=True)
server.serve_forever()
"""


@pytest.fixture
def server_process():
    started = []

    def start(**settings):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, TOKEN, json.dumps(settings)], stdout=subprocess.PIPE, text=True, env=env
        )
        started.append(proc)
        return json.loads(proc.stdout.readline()), psutil.Process(proc.pid)

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def _authenticated(handle: dict) -> socket.socket:
    sock = socket.create_connection((handle["host"], handle["port"]), timeout=10)
    for buf in wire.encode({"kind": "hello", "token": TOKEN}):
        sock.sendall(buf)
    assert wire.recv_frame(sock, 1 << 20)[0]["kind"] == "welcome"
    return sock


def _trickle(handle: dict, stop: threading.Event) -> None:
    """A peer that sends its hello one byte every 0.2 s."""
    hello = b"".join(bytes(b) for b in wire.encode({"kind": "hello", "token": TOKEN}))
    try:
        with socket.create_connection((handle["host"], handle["port"]), timeout=10) as sock:
            for i in range(len(hello)):
                if stop.is_set():
                    return
                sock.sendall(hello[i : i + 1])
                time.sleep(0.2)
    except OSError:
        pass  # cut off by the server: the point


def test_many_slow_peers_hold_bounded_threads_and_a_connected_client_is_served(server_process):
    handle, proc = server_process(handshake_timeout_s=1.0, max_connections=8, max_handshakes=16)
    client = BackendClient(handle, retries=0)
    client.call("set_global_steps", {"global_steps": 1})
    base_threads = proc.num_threads()
    stop = threading.Event()
    peers = [threading.Thread(target=_trickle, args=(handle, stop), daemon=True) for _ in range(100)]
    for peer in peers:
        peer.start()
    peak = 0
    start = time.monotonic()
    while time.monotonic() - start < 3.0:
        peak = max(peak, proc.num_threads())
        client.call("set_global_steps", {"global_steps": 2})  # the connected client is served throughout
        time.sleep(0.05)
    stop.set()
    assert peak <= base_threads + 16, (base_threads, peak)  # the client's thread is among the base
    for peer in peers:
        peer.join(timeout=5)
    time.sleep(1.5)  # past the handshake deadline: every trickling peer has been cut off
    assert proc.num_threads() <= base_threads + 1
    fresh = BackendClient(handle, retries=0)
    assert fresh.call("set_global_steps", {"global_steps": 3}) is None
    fresh.close()
    client.close()


def _stranger(handle: dict, stop: threading.Event, cut: list[int]) -> None:
    """A peer that connects, says nothing, and reconnects the moment it is cut off."""
    while not stop.is_set():
        try:
            with socket.create_connection((handle["host"], handle["port"]), timeout=1) as sock:
                while not stop.is_set():
                    try:
                        if sock.recv(1) == b"":
                            break
                    except TimeoutError:
                        continue
        except OSError:
            pass
        cut[0] += 1


def test_a_flood_of_strangers_never_keeps_out_a_client_with_the_token(server_process):
    """100 unauthenticated peers reconnecting as fast as they are cut, with a deadline far away: every fresh
    client with the token gets in within a second, and one holding its slot keeps being served."""
    handle, proc = server_process(handshake_timeout_s=60.0, max_connections=2, max_handshakes=16)
    held = BackendClient(handle, retries=0)
    held.call("set_global_steps", {"global_steps": 1})
    base_threads = proc.num_threads()
    stop, cut = threading.Event(), [0]
    strangers = [threading.Thread(target=_stranger, args=(handle, stop, cut), daemon=True) for _ in range(100)]
    for peer in strangers:
        peer.start()
    try:
        time.sleep(1.0)  # the strangers fill every unauthenticated slot and keep refilling them
        waits, peak = [], 0
        for step in range(10):
            start = time.monotonic()
            fresh = BackendClient(handle, retries=0, connect_timeout_s=5)
            fresh.call("set_global_steps", {"global_steps": step})
            fresh.close()
            waits.append(time.monotonic() - start)
            held.call("set_global_steps", {"global_steps": step})
            peak = max(peak, proc.num_threads())
    finally:
        stop.set()
        for peer in strangers:
            peer.join(timeout=5)
    print(f"strangers cut {cut[0]} times; client waits max {max(waits):.3f} s; threads {base_threads} -> {peak}")
    assert cut[0] > 100, f"the strangers were cut {cut[0]} times: no flood to speak of"
    assert max(waits) < 1.0, f"a client with the token waited {max(waits):.2f} s behind the strangers"
    # bounded by the two caps, plus a few threads of cut connections that are still returning
    assert peak <= base_threads + 16 + 2 + 4, (base_threads, peak)
    held.close()


def test_a_connection_over_the_cap_is_refused_with_a_message(server_process):
    handle, _ = server_process(max_connections=1)
    first = BackendClient(handle, retries=0)
    first.call("set_global_steps", {"global_steps": 1})
    with pytest.raises(BackendError, match="max_connections=1"):
        BackendClient(handle, retries=0).call("set_global_steps", {"global_steps": 2})
    first.close()
    time.sleep(0.2)
    BackendClient(handle, retries=0).call("set_global_steps", {"global_steps": 3})


@pytest.mark.parametrize("part", ["header", "payload"])
def test_a_lying_length_prefix_allocates_only_what_arrives(server_process, part):
    handle, proc = server_process(max_message_bytes=1 << 30)
    liars = [_authenticated(handle) for _ in range(3)]
    before = proc.memory_info().rss
    claim = 900_000_000
    head, payload = (claim, 0) if part == "header" else (16, claim)
    for sock in liars:
        sock.sendall(wire.PREFIX.pack(wire.MAGIC, wire.PROTOCOL_VERSION, 0, head, payload) + b"x" * 10)
    time.sleep(1.0)
    grown = proc.memory_info().rss - before
    assert grown < 50 * 2**20, f"the server grew by {grown / 2**20:.0f} MB for 3 claims of 900 MB"
    assert BackendClient(handle, retries=0).call("set_global_steps", {"global_steps": 1}) is None
    for sock in liars:
        sock.close()


def test_an_idle_authenticated_connection_is_closed_and_a_client_reconnects(server_process):
    handle, _ = server_process(idle_timeout_s=0.5)
    sock = _authenticated(handle)
    start = time.monotonic()
    assert sock.recv(1) == b"", "the server closed the idle connection"
    assert time.monotonic() - start < 0.5 + 1.0
    sock.close()
    client = BackendClient(handle, retries=1, backoff_s=0.01)
    client.call("set_global_steps", {"global_steps": 1})
    time.sleep(1.0)
    client.call("set_global_steps", {"global_steps": 2})  # its connection was closed meanwhile: it reconnects
    client.close()


def _hostile_headers() -> list[bytes]:
    """Pre-auth frame headers that crashed the server (nested tuples: SIGSEGV) or raised in its thread."""
    nested = msgpack.packb([])
    for _ in range(300):
        nested = msgpack.packb(msgpack.ExtType(1, nested))
    return [
        msgpack.packb({"kind": "hello", "x": msgpack.ExtType(1, nested)}),
        msgpack.packb({(1, 2): 1}),
        msgpack.packb({"kind": "hello", "x": msgpack.ExtType(1, msgpack.packb(5))}),
        msgpack.packb({"kind": "hello", "tensors": [{"name": "x", "dtype": "uint8", "shape": [True], "nbytes": 1}]}),
    ]


def test_malformed_frames_before_the_hello_are_refused_in_bounded_log_lines(tmp_path):
    """A stranger's frames under 1 KB once killed the server; now each is one refusal, the log is capped
    per window, and a client with the token is served throughout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    log_path = tmp_path / "server.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, TOKEN, "{}"], stdout=subprocess.PIPE, stderr=log, text=True, env=env
        )
    try:
        handle = json.loads(proc.stdout.readline())
        frames = _hostile_headers()
        for i in range(200):
            header = frames[i % len(frames)]
            with socket.create_connection((handle["host"], handle["port"]), timeout=5) as sock:
                sock.sendall(wire.PREFIX.pack(wire.MAGIC, wire.PROTOCOL_VERSION, 0, len(header), 0) + header)
                reply, _, _ = wire.recv_frame(sock, 1 << 20)  # answered with the reason, then closed
                assert reply["kind"] == "error" and reply["error"]["type"] == "MalformedFrame", reply
        assert proc.poll() is None, f"the server died (exit {proc.returncode})"
        assert BackendClient(handle, retries=0).call("set_global_steps", {"global_steps": 1}) is None
    finally:
        proc.kill()
        proc.wait()
    text = log_path.read_text()
    assert "Traceback" not in text
    refusals = text.count("refused a frame")
    assert 1 <= refusals <= 20, refusals  # 200 refusals in a few seconds: one window's cap
