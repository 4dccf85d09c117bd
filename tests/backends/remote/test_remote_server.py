"""The server: refusals (token, size, malformed, version) run nothing and spare other connections."""

from __future__ import annotations

import logging
import socket

import msgpack
import pytest
import torch
from remote_helpers import TOKEN, handle_of

from rlflow.backends.remote import wire
from rlflow.backends.remote.client import BackendClient, check_handle
from rlflow.batch import Batch
from rlflow.errors import RemoteCallFailed


def _batch(rows: int = 2) -> Batch:
    return Batch(
        {"prompts": torch.arange(rows * 3).reshape(rows, 3), "prompt_mask": torch.ones(rows, 3, dtype=torch.long)},
        {"uid": [f"u{i}" for i in range(rows)]},
    )


def _call_frame(method: str = "generate") -> list:
    part, tensors = wire.batch_to_wire(_batch())
    return wire.encode({"kind": "call", "method": method, "id": "c1", "args": {"params": {}}, "batch": part}, tensors)


def _raw_exchange(server, *frames: list) -> list[dict]:
    """Send frames on a fresh connection; collect replies until the server closes it."""
    replies = []
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        try:
            for frame in frames:
                for buf in frame:
                    sock.sendall(buf)
            while True:
                header, _, _ = wire.recv_frame(sock, 1 << 22)
                replies.append(header)
        except (wire.ConnectionClosed, ConnectionResetError, BrokenPipeError):
            pass
    return replies


def _hello(token: str | None = TOKEN) -> list:
    return wire.encode({"kind": "hello", **({"token": token} if token is not None else {})})


def _client(server, **kw) -> BackendClient:
    return BackendClient(handle_of(server), retries=kw.pop("retries", 0), backoff_s=0.01, **kw)


@pytest.mark.parametrize("token", [None, "wrong-token", 12345])
def test_missing_or_wrong_token_is_refused_and_nothing_runs(served, caplog, token):
    with caplog.at_level(logging.WARNING, logger="rlflow.backends.remote.server"):
        replies = _raw_exchange(served, _hello(token), _call_frame())
    assert [r["kind"] for r in replies] == ["error"]
    assert replies[0]["error"]["type"] == "AuthError"
    assert "authentication failed" in replies[0]["error"]["message"]
    assert served.executed == {} and served.refused == 1
    assert "refused a frame from 127.0.0.1" in caplog.text


def test_a_call_without_hello_is_refused_and_not_run(served):
    replies = _raw_exchange(served, _call_frame())
    assert (
        replies[0]["error"]["type"] == "AuthError" and "first frame must be 'hello'" in replies[0]["error"]["message"]
    )
    assert served.executed == {}


def test_client_with_a_wrong_token_gets_a_clear_error_without_retrying(served):
    client = BackendClient(handle_of(served, token="nope"), retries=3, backoff_s=5)
    with pytest.raises(wire.AuthError, match=r"'reference' at 127\.0\.0\.1:\d+, generate: .*authentication failed"):
        client.call("generate", {"params": {}}, _batch())
    assert client.reconnects == 0 and served.executed == {}


def test_oversized_frame_is_refused_and_the_server_keeps_serving(served):
    huge = [wire.PREFIX.pack(wire.MAGIC, wire.PROTOCOL_VERSION, 0, 16, 64 << 20)]
    replies = _raw_exchange(served, _hello(), huge)
    assert [r["kind"] for r in replies] == ["welcome", "error"]
    assert (
        replies[1]["error"]["type"] == "FrameTooLarge" and "max_message_bytes=1048576" in replies[1]["error"]["message"]
    )
    assert served.executed == {}
    assert _client(served).call("set_global_steps", {"global_steps": 3}) is None  # others still served


def test_unauthenticated_peer_cannot_make_the_server_allocate(served):
    big_hello = [wire.PREFIX.pack(wire.MAGIC, wire.PROTOCOL_VERSION, 0, 512 * 1024, 0)]
    replies = _raw_exchange(served, big_hello)
    assert replies[0]["error"]["type"] == "FrameTooLarge"


def test_malformed_frames_are_answered_and_other_clients_unaffected(served):
    other = _client(served)
    other.connect()
    garbage = [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"]
    assert _raw_exchange(served, _hello(), garbage)[1]["error"]["type"] == "MalformedFrame"
    not_msgpack = [wire.PREFIX.pack(wire.MAGIC, wire.PROTOCOL_VERSION, 0, 4, 0) + b"\xc1\xc1\xc1\xc1"]
    assert "not valid msgpack" in _raw_exchange(served, _hello(), not_msgpack)[1]["error"]["message"]
    header = msgpack.packb({"kind": "call", "method": "generate", "tensors": "nope"})
    bad_tensors = [wire.PREFIX.pack(wire.MAGIC, wire.PROTOCOL_VERSION, 0, len(header), 0) + header]
    assert "'tensors' must be a list" in _raw_exchange(served, _hello(), bad_tensors)[1]["error"]["message"]
    assert served.executed == {}
    out = other.call("generate", {"params": {"max_response_length": 3}}, _batch())
    assert out["responses"].shape == (2, 3)


def test_unknown_method_and_bad_arguments_are_errors_that_keep_the_connection(served):
    """Answered failures are ``RemoteCallFailed``, not ``BackendError``: the runtime must not restart a live backend."""
    client = _client(served)
    with pytest.raises(RemoteCallFailed, match="unknown method 'train'; known: generate"):
        client.call("train")
    with pytest.raises(RemoteCallFailed, match="argument 'global_steps' must be int"):
        client.call("set_global_steps", {"global_steps": "3"})
    with pytest.raises(RemoteCallFailed, match="update_actor.*KeyError") as info:
        client.call("update_actor", {"params": {}}, _batch())  # the engine needs advantages
    assert not isinstance(info.value, wire.BackendError)
    assert client.reconnects == 0 and client.call("ping")["protocol"] == wire.PROTOCOL_VERSION


def test_protocol_version_mismatch_names_both_versions(served):
    old = [wire.PREFIX.pack(wire.MAGIC, wire.PROTOCOL_VERSION + 1, 0, 0, 0)]
    reply = _raw_exchange(served, old)[0]
    assert reply["error"]["type"] == "ProtocolMismatch"
    assert f"version {wire.PROTOCOL_VERSION + 1}" in reply["error"]["message"]
    assert f"version {wire.PROTOCOL_VERSION}" in reply["error"]["message"]
    with pytest.raises(
        wire.ProtocolMismatch, match=rf"speaks version 99, this client speaks version {wire.PROTOCOL_VERSION}"
    ):
        check_handle(handle_of(served, protocol=99), "reference")


def test_handle_advertises_a_reachable_host_when_binding_every_interface():
    from remote_fake_engine import FakeEngine

    from rlflow.backends.remote.server import BackendServer

    wildcard = BackendServer(FakeEngine(), token=TOKEN, host="0.0.0.0")
    named = BackendServer(FakeEngine(), token=TOKEN, host="0.0.0.0", advertise_host="node-7")
    try:
        assert wildcard.handle()["host"] == socket.gethostname()
        assert named.handle()["host"] == "node-7" and named.handle()["port"] > 0
    finally:
        for server in (wildcard, named):
            server._tcp.server_close()
