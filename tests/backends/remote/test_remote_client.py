"""The client: reconnect-and-retry after a dropped connection, never applying an update twice."""

from __future__ import annotations

import threading

import pytest
import torch
from remote_helpers import handle_of

from rlflow.backends.remote.client import BackendClient
from rlflow.batch import Batch
from rlflow.errors import BackendError


def _batch() -> Batch:
    return Batch(
        {"prompts": torch.tensor([[1, 2], [3, 4]]), "advantages": torch.tensor([[0.5], [-0.5]])}, {"uid": ["a", "b"]}
    )


def _via(proxy, served, **kw) -> BackendClient:
    client = BackendClient(handle_of(served, port=proxy.port), retries=kw.pop("retries", 3), backoff_s=0.01, **kw)
    client.connect()
    return client


def test_idempotent_call_is_retried_after_the_connection_drops(served, proxy):
    client = _via(proxy, served)
    proxy.drop_next_reply()
    out = client.call("generate", {"params": {"max_response_length": 5}}, _batch())
    assert proxy.drops == 1 and client.reconnects == 1
    assert served.executed["generate"] == 2  # read-only: simply run again
    assert torch.equal(out["responses"][0], (torch.tensor(3) + torch.arange(5)) % 97)
    assert out["response_text"] == ["r3", "r7"]


def test_update_actor_is_never_applied_twice_on_retry(served, proxy):
    client = _via(proxy, served)
    proxy.drop_next_reply()
    metrics = client.call("update_actor", {"params": {}}, _batch())
    assert proxy.drops == 1 and client.reconnects == 1
    assert served.executed["update_actor"] == 1 and served.engine.updates == 1
    assert metrics["actor/updates_applied"] == 1.0  # the remembered reply of the first (only) run
    proxy.drop_next_reply()
    assert client.call("update_weights", {"global_steps": 1})["fake/updates_applied"] == 1.0
    assert served.executed["update_weights"] == 1
    assert client.call("update_actor", {"params": {}}, _batch())["actor/updates_applied"] == 2.0  # a new call id runs


def test_retry_of_an_update_still_running_waits_for_it_instead_of_rerunning(served, proxy):
    client = _via(proxy, served)
    threading.Timer(0.2, proxy.cut_clients).start()  # while the server is inside update_actor
    metrics = client.call("update_actor", {"params": {"sleep_s": 1.0}}, _batch())
    assert proxy.drops == 1 and client.reconnects == 1
    assert metrics["actor/updates_applied"] == 1.0
    assert served.executed["update_actor"] == 1 and served.engine.updates == 1


def test_remembered_replies_are_bounded(served):
    served.remember_calls = 2
    client = BackendClient(handle_of(served), retries=0)
    for _ in range(4):
        client.call("update_weights", {"global_steps": 1})
    assert len(served._remembered) == 2


def test_a_gone_server_is_a_backend_error_naming_backend_address_and_method(served):
    client = BackendClient(handle_of(served), retries=2, backoff_s=0.01)
    client.connect()
    served.shutdown()
    client._sock.close()  # the server is gone and so is its end of the connection
    client._sock = None
    with pytest.raises(BackendError) as info:
        client.call("compute_log_prob", {"params": {}}, _batch())
    message = str(info.value)
    assert "'reference'" in message and f"127.0.0.1:{served.port}" in message and "compute_log_prob" in message
    assert "unreachable after 3 attempt(s)" in message


def test_traffic_counts_every_byte_per_method(served):
    client = BackendClient(handle_of(served), retries=0)
    before = client.traffic()
    assert before["forwarder/bytes_sent"] == 0
    batch = _batch()
    client.call("generate", {"params": {"max_response_length": 64}}, batch)
    client.call("update_weights", {"global_steps": 1})
    traffic = client.traffic()
    assert traffic["forwarder/bytes_sent"] == sum(
        v for k, v in traffic.items() if k.startswith("forwarder/bytes_sent/")
    )
    assert traffic["forwarder/bytes_received/generate"] > 2 * 64 * 8 * 2  # responses + mask, int64
    assert (
        traffic["forwarder/bytes_sent/update_weights"] < 512
        and traffic["forwarder/bytes_received/update_weights"] < 512
    )
    assert traffic["forwarder/calls"] == 2
