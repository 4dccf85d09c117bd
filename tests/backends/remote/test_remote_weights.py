"""Rollout weights over the reference wire: parts under the frame cap, loaded whole with their version, once."""

from __future__ import annotations

import pytest
import torch
from remote_fake_engine import VersionlessWeightsEngine, WeightsEngine
from remote_helpers import TOKEN, handle_of

from rlflow.backends.remote import wire
from rlflow.backends.remote.client import BackendClient
from rlflow.backends.remote.reference import ReferenceBackend
from rlflow.backends.remote.server import BackendServer
from rlflow.backends.remote.weights import WeightStaging, split_weights, staging_limit
from rlflow.errors import RemoteCallFailed

CAP = 1 << 20


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(300, 300, generator=g) for i in range(8)}  # 360 KB each, 2.9 MB


@pytest.fixture
def weights_server():
    server = BackendServer(WeightsEngine(), token=TOKEN, max_message_bytes=CAP).start_in_thread()
    yield server
    server.shutdown()


def _backend(server, port: int | None = None) -> ReferenceBackend:
    client = BackendClient(handle_of(server, **({"port": port} if port else {})), backoff_s=0.01, max_message_bytes=CAP)
    return ReferenceBackend(client)


def test_parts_fit_the_frame_cap_and_keep_every_tensor_in_order():
    state = _state()
    parts = split_weights(state, CAP)
    assert len(parts) == 4  # two 360 KB tensors per 1 MiB frame
    assert [name for part in parts for name in part] == list(state)
    header = {"kind": "call", "method": "load_rollout_weights", "id": "x" * 32, "args": {"global_steps": 1}}
    assert all(wire.frame_size(wire.encode(header, part)) <= CAP for part in parts)


def test_a_tensor_larger_than_a_frame_is_refused_naming_it_and_the_fix():
    with pytest.raises(wire.FrameTooLarge, match=r"tensor .big. alone needs .*\(raise max_message_bytes"):
        split_weights({"small": torch.zeros(2), "big": torch.zeros(1 << 18)}, CAP)


def test_the_engine_gets_the_whole_state_once_with_its_version(weights_server):
    backend = _backend(weights_server)
    state = _state()
    metrics = backend.load_rollout_weights(state, 3)
    engine = weights_server.engine
    assert weights_server.executed["load_rollout_weights"] == 4 and len(engine.loaded) == 1
    assert list(engine.loaded[0]) == list(state)
    assert all(torch.equal(engine.loaded[0][k], v) for k, v in state.items())
    assert engine.global_steps == 3
    assert metrics["sync/bytes"] == sum(t.numel() * 4 for t in state.values())
    assert metrics["forwarder/bytes_sent"] > metrics["sync/bytes"]  # every byte crossed the wire


def test_a_part_resent_after_a_dropped_reply_is_not_staged_or_loaded_twice(weights_server):
    from remote_helpers import DroppingProxy

    proxy = DroppingProxy(weights_server.port)
    try:
        backend = _backend(weights_server, proxy.port)
        proxy.drop_next_reply()  # the reply to part 0 is lost: the client resends it with the same id
        backend.load_rollout_weights(_state(), 1)
        assert proxy.drops == 1
        assert weights_server.executed["load_rollout_weights"] == 4 and len(weights_server.engine.loaded) == 1
    finally:
        proxy.close()


def test_a_part_out_of_order_is_refused_and_nothing_loads(weights_server):
    client = BackendClient(handle_of(weights_server), max_message_bytes=CAP)
    args = {"global_steps": 1, "transfer": "t1", "parts": 2}
    with pytest.raises(RemoteCallFailed, match="part 1 of transfer t1 arrived out of order"):
        client.call("load_rollout_weights", {**args, "part": 1}, tensors={"w": torch.zeros(2)})
    assert weights_server.engine.loaded == []


def test_a_served_engine_without_the_version_argument_still_loads_with_a_deprecation_warning():
    server = BackendServer(VersionlessWeightsEngine(), token=TOKEN, max_message_bytes=CAP).start_in_thread()
    try:
        with pytest.warns(DeprecationWarning, match=r"load_rollout_weights\(state, global_steps\)"):
            _backend(server).load_rollout_weights({"w": torch.ones(4)}, 5)
        assert len(server.engine.loaded) == 1 and server.engine.global_steps == 5
    finally:
        server.shutdown()


def test_an_engine_without_load_rollout_weights_answers_so(served):
    client = BackendClient(handle_of(served))
    args = {"global_steps": 1, "transfer": "t1", "parts": 1, "part": 0}
    with pytest.raises(RemoteCallFailed, match="FakeEngine cannot take rollout weights"):
        client.call("load_rollout_weights", args, tensors={"w": torch.zeros(2)})


def test_a_new_transfer_drops_an_unfinished_one():
    staging = WeightStaging()
    assert staging.add({"transfer": "a", "part": 0, "parts": 2}, {"w": torch.zeros(1)}) is None
    state = staging.add({"transfer": "b", "part": 0, "parts": 1}, {"v": torch.ones(1)})
    assert list(state) == ["v"]
    with pytest.raises(Exception, match="out of order"):  # a's second part no longer belongs to anything
        staging.add({"transfer": "a", "part": 1, "parts": 2}, {"x": torch.zeros(1)})


@pytest.mark.parametrize(
    "args",
    [{"part": 0, "parts": 1}, {"transfer": "t", "part": 2, "parts": 2}, {"transfer": "t", "part": 0, "parts": True}],
)
def test_malformed_transfer_arguments_are_refused(args):
    with pytest.raises(Exception, match="load_rollout_weights"):
        WeightStaging().add(args, {})


def test_a_transfer_larger_than_twice_the_served_model_is_refused_and_dropped():
    staging = WeightStaging(max_bytes=100)
    assert staging.add({"transfer": "a", "part": 0, "parts": 3}, {"w": torch.zeros(20)}) is None  # 80 bytes
    with pytest.raises(Exception, match="exceeds 100 bytes, twice the served model's size"):
        staging.add({"transfer": "a", "part": 1, "parts": 3}, {"v": torch.zeros(20)})
    assert staging._state == {} and staging._bytes == 0  # nothing kept


def test_the_limit_is_twice_the_engine_model_or_none_when_it_shows_none():
    class WithModel:
        model = torch.nn.Linear(4, 2)  # 8 + 2 floats

    assert staging_limit(WithModel()) == 2 * 10 * 4
    assert staging_limit(object()) is None


@pytest.mark.parametrize(
    ("state", "version", "says"),
    [
        ({"w": torch.ones(4, dtype=torch.bool)}, 1, "is torch.bool; weights are floating point"),
        ({"w": torch.ones(4, dtype=torch.complex64)}, 1, "is torch.complex64"),
        ({"w": torch.tensor([1.0, float("nan")])}, 1, "holds NaN or infinity"),
        ({"w": torch.tensor([float("inf")])}, 1, "holds NaN or infinity"),
        ({"w": torch.ones(4)}, -1, "global_steps must be a step number"),
        ({"w": torch.ones(4)}, 2**62, "global_steps must be a step number"),
    ],
)
def test_an_authenticated_push_the_rollout_must_not_serve_is_refused_and_nothing_loads(
    weights_server, state, version, says
):
    backend = _backend(weights_server)
    with pytest.raises(RemoteCallFailed, match=says):
        backend.load_rollout_weights(state, version)
    assert weights_server.engine.loaded == [] and weights_server.engine.global_steps != version
