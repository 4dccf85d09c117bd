"""The wire: Batch round trips exactly; bad frames are refused with clear errors; no pickle."""

from __future__ import annotations

import socket
import struct

import msgpack
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlflow.backends.remote import wire
from rlflow.batch import Batch


def _round_trip(batch: Batch, max_bytes: int = 1 << 24) -> tuple[Batch, int, int]:
    a, b = socket.socketpair()
    with a, b:
        part, tensors = wire.batch_to_wire(batch)
        sent = wire.send_frame(a, wire.encode({"kind": "call", "batch": part}, tensors), max_bytes)
        header, got, received = wire.recv_frame(b, max_bytes)
    return wire.batch_from_wire(header["batch"], got), sent, received


def _assert_same(a: Batch, b: Batch) -> None:
    assert a.tensors.keys() == b.tensors.keys()
    for key, tensor in a.tensors.items():
        assert b.tensors[key].dtype == tensor.dtype, key
        assert b.tensors[key].shape == tensor.shape, key
        assert torch.equal(b.tensors[key], tensor), key
    assert b.non_tensors == a.non_tensors
    assert {k: type(v) for k, v in b.non_tensors.items()} == {k: type(v) for k, v in a.non_tensors.items()}
    assert b.metrics == a.metrics


def test_batch_round_trip_keeps_every_dtype_shape_and_value():
    g = torch.Generator().manual_seed(0)
    batch = Batch(
        {
            "prompts": torch.randint(0, 50_000, (3, 5), generator=g),
            "prompt_mask": torch.tensor([[0, 0, 1, 1, 1]] * 3, dtype=torch.int32),
            "old_log_probs": -torch.rand(3, 4, generator=g),
            "bf16": torch.randn(3, 4, generator=g).to(torch.bfloat16),
            "half": torch.randn(3, 2, 2, generator=g).to(torch.float16),
            "f64": torch.randn(3, generator=g, dtype=torch.float64),
            "flags": torch.tensor([True, False, True]),
            "bytes": torch.tensor([[1], [2], [255]], dtype=torch.uint8),
            "empty": torch.empty(3, 0),
            "strided": torch.arange(18).reshape(3, 6)[:, ::2],  # not contiguous
        },
        {
            "uid": ["a", "b", "ü-β"],
            "reward_info": [{"db_id": "x", "gold": "SELECT 1", "nested": (1, 2.5, None)}, {}, {"k": [1, {"z": True}]}],
            "pair": [(1, "a"), (2, "b"), ()],
        },
        {"timing_s/gen": 0.25, "perf/total_num_tokens": 12},
    )
    back, sent, received = _round_trip(batch)
    _assert_same(batch, back)
    assert sent == received > sum(t.numel() * t.element_size() for t in batch.tensors.values())


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=40, deadline=None)
@given(st.lists(json_like, min_size=1, max_size=4))
def test_non_tensor_values_round_trip_exactly(values):
    batch = Batch({"x": torch.zeros(len(values), 1)}, {"v": values}, {})
    back, _, _ = _round_trip(batch)
    assert back.non_tensors["v"] == values
    assert [type(v) for v in back.non_tensors["v"]] == [type(v) for v in values]


def test_unsupported_non_tensor_value_is_a_clear_error():
    batch = Batch({}, {"v": [object()]})
    with pytest.raises(TypeError, match="cannot send a object over the wire"):
        wire.encode({"kind": "call", "batch": wire.batch_to_wire(batch)[0]})


def test_unsupported_dtype_is_a_clear_error():
    with pytest.raises(wire.BackendError, match="complex128, which the wire does not carry"):
        wire.encode({}, {"z": torch.zeros(2, dtype=torch.complex128)})


def test_no_pickle_anywhere():
    """Frames decode only into plain data; an extension code other than tuples is refused."""
    evil = msgpack.packb({"kind": "call", "x": msgpack.ExtType(42, b"cos\nsystem\n")}, use_bin_type=True)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(wire.PREFIX.pack(wire.MAGIC, wire.PROTOCOL_VERSION, 0, len(evil), 0) + evil)
        with pytest.raises(wire.MalformedFrame, match="unknown msgpack extension type 42"):
            wire.recv_frame(b, 1 << 20)


def _raw(prefix_fields: tuple, body: bytes = b"") -> wire.WireError:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">4sHHIQ", *prefix_fields) + body)
        with pytest.raises(wire.WireError) as info:
            wire.recv_frame(b, 1 << 20)
    return info.value


def test_bad_frames_are_named():
    assert isinstance(_raw((b"HTTP", 1, 0, 0, 0)), wire.MalformedFrame)
    mismatch = _raw((wire.MAGIC, 7, 0, 0, 0))
    assert isinstance(mismatch, wire.ProtocolMismatch)
    assert "version 7" in str(mismatch) and f"version {wire.PROTOCOL_VERSION}" in str(mismatch)
    too_big = _raw((wire.MAGIC, wire.PROTOCOL_VERSION, 0, 10, 2 << 20))
    assert isinstance(too_big, wire.FrameTooLarge) and "max_message_bytes=1048576" in str(too_big)
    assert "not valid msgpack" in str(_raw((wire.MAGIC, wire.PROTOCOL_VERSION, 0, 3, 0), b"\xc1\xc1\xc1"))
    lying = msgpack.packb({"tensors": [{"name": "x", "dtype": "float32", "shape": [4], "nbytes": 16}]})
    err = _raw((wire.MAGIC, wire.PROTOCOL_VERSION, 0, len(lying), 0), lying)
    assert "past the end" in str(err)
    wrong = msgpack.packb({"tensors": [{"name": "x", "dtype": "float32", "shape": [4], "nbytes": 15}]})
    assert "do not match shape" in str(_raw((wire.MAGIC, wire.PROTOCOL_VERSION, 0, len(wrong), 16), wrong + bytes(16)))


def test_sender_refuses_oversized_message_before_sending():
    a, b = socket.socketpair()
    with a, b:
        with pytest.raises(wire.FrameTooLarge, match="exceeds max_message_bytes=1024"):
            wire.send_frame(a, wire.encode({}, {"x": torch.zeros(1024)}), 1024)


def _nested_tuples(depth: int) -> bytes:
    data = msgpack.packb([])
    for _ in range(depth):
        data = msgpack.packb(msgpack.ExtType(1, data))
    return data


@pytest.mark.parametrize("depth", [33, 250, 5000])
def test_deeply_nested_tuples_are_refused_not_a_crash(depth):
    """Each tuple level recursed through msgpack's C code: a few hundred levels were a SIGSEGV."""
    body = msgpack.packb({"kind": "hello", "x": msgpack.ExtType(1, _nested_tuples(depth))})
    err = _raw((wire.MAGIC, wire.PROTOCOL_VERSION, 0, len(body), 0), body)
    assert isinstance(err, wire.MalformedFrame) and "nested more than 32 deep" in str(err)


def test_tuples_as_deep_as_the_bound_still_round_trip():
    value: object = "leaf"
    for _ in range(wire.MAX_TUPLE_NESTING):
        value = (value,)
    assert wire.unpack(wire.pack(value)) == value


@pytest.mark.parametrize(
    "header, says",
    [
        (msgpack.packb({(1, 2): 1}), "unhashable"),  # a map with a list key
        (msgpack.packb({"x": msgpack.ExtType(1, msgpack.packb(5))}), "must hold a list"),  # a tuple of an int
        (msgpack.packb({"x": msgpack.ExtType(9, b"")}), "unknown msgpack extension type 9"),
        (msgpack.packb({"tensors": [{"name": "x", "dtype": "float32", "shape": [True], "nbytes": 4}]}), "shape"),
        (msgpack.packb({"tensors": [{"name": "x", "dtype": "bool", "shape": [1], "nbytes": True}]}), "do not match"),
        (msgpack.packb({"tensors": ["x"]}), "bad tensor descriptor"),
    ],
)
def test_malformed_headers_are_malformed_frames(header, says):
    err = _raw((wire.MAGIC, wire.PROTOCOL_VERSION, 0, len(header), 0), header)
    assert isinstance(err, wire.MalformedFrame) and says in str(err)
