"""The remote-backend wire: length-prefixed frames of a msgpack header plus raw tensor bytes.

No pickle anywhere, and every frame is checked against a size cap before its body is read.
Design notes: docs/design/wire.md.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import msgpack
import torch

from rlflow.backends.remote.config import DEFAULT_MAX_MESSAGE_BYTES  # noqa: F401 (re-exported)
from rlflow.batch import Batch
from rlflow.errors import BackendError

PROTOCOL_VERSION = 1
MAGIC = b"RLFW"
PREFIX = struct.Struct(">4sHHIQ")
ALIGN = 16
RECV_CHUNK = 1 << 20  # bodies larger than this are received chunk by chunk into a growing buffer
_TUPLE_EXT = 1
MAX_TUPLE_NESTING = 32  # tuples inside tuples; Batch.non_tensors needs two or three

# Only plain numeric dtypes travel; names are torch's own (str(torch.float32) minus "torch.").
DTYPES: dict[str, torch.dtype] = {
    str(dt).removeprefix("torch."): dt
    for dt in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
    )
}


class WireError(BackendError):
    """A frame that cannot be accepted; the connection that sent it is closed."""


class MalformedFrame(WireError):
    """Bytes that are not a valid frame of this protocol."""


class FrameTooLarge(WireError):
    """A frame over the configured ``max_message_bytes``."""


class ProtocolMismatch(WireError):
    """The peer speaks another protocol version."""


class AuthError(WireError):
    """A missing or wrong token."""


class ConnectionClosed(ConnectionError):
    """The peer closed the connection (a retryable transport failure, not a protocol error)."""


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return msgpack.ExtType(_TUPLE_EXT, pack(list(obj)))
    raise TypeError(
        f"cannot send a {type(obj).__name__} over the wire; non-tensor values must be "
        "str, int, float, bool, None, bytes, or lists/tuples/dicts of those"
    )


def pack(obj: Any) -> bytes:
    # strict_types routes tuples (and subclasses of list/dict) to _pack_default instead of flattening them
    return msgpack.packb(obj, use_bin_type=True, strict_types=True, default=_pack_default)


def unpack(data: bytes, _depth: int = 0) -> Any:
    """Decode one msgpack value. Every way the bytes can be wrong is a ``MalformedFrame``: tuples nest
    at most ``MAX_TUPLE_NESTING`` deep (each level recurses through msgpack's C code, which a few
    hundred levels crash), a tuple holds a list, map keys are hashable."""
    if _depth > MAX_TUPLE_NESTING:
        raise MalformedFrame(f"tuples nested more than {MAX_TUPLE_NESTING} deep")

    def ext_hook(code: int, payload: bytes) -> Any:
        if code != _TUPLE_EXT:
            raise MalformedFrame(f"unknown msgpack extension type {code}")
        items = unpack(payload, _depth + 1)
        if not isinstance(items, list):
            raise MalformedFrame(f"a tuple extension must hold a list, not a {type(items).__name__}")
        return tuple(items)

    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=ext_hook)
    except TypeError as exc:  # a map key that cannot be hashed (a list, a map)
        raise MalformedFrame(f"not a valid message: {exc}") from None


def _padded(n: int) -> int:
    return -n % ALIGN


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def describe(name: str, tensor: torch.Tensor) -> dict[str, Any]:
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise BackendError(
            f"tensor {name!r} has dtype {dtype}, which the wire does not carry; known: {', '.join(DTYPES)}"
        )
    return {"name": name, "dtype": dtype, "shape": list(tensor.shape), "nbytes": tensor.numel() * tensor.element_size()}


def encode(header: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None) -> list[bytes | memoryview]:
    """The buffers of one frame, ready for ``sendall`` one after another (tensors are not copied twice)."""
    tensors = tensors or {}
    header = dict(header, tensors=[describe(name, t) for name, t in tensors.items()])
    head = pack(header)
    buffers: list[bytes | memoryview] = []
    payload_len = 0
    for tensor in tensors.values():
        if tensor.numel():
            data = _tensor_bytes(tensor)
            buffers.append(data)
            payload_len += len(data)
        pad = _padded(tensor.numel() * tensor.element_size())
        if pad:
            buffers.append(bytes(pad))
            payload_len += pad
    prefix = PREFIX.pack(MAGIC, PROTOCOL_VERSION, 0, len(head), payload_len)
    return [prefix + head, *buffers]


def frame_size(buffers: list[bytes | memoryview]) -> int:
    return sum(len(b) for b in buffers)


def send_frame(sock: socket.socket, buffers: list[bytes | memoryview], max_bytes: int) -> int:
    """Send one encoded frame; returns the bytes sent. Refuses frames over ``max_bytes`` before sending."""
    size = frame_size(buffers)
    if size > max_bytes:
        raise FrameTooLarge(
            f"message of {size} bytes exceeds max_message_bytes={max_bytes} "
            "(send smaller batches, or raise max_message_bytes in the resource config)"
        )
    for buf in buffers:
        sock.sendall(buf)
    return size


def _recv_into(sock: socket.socket, view: memoryview, deadline: float | None) -> int:
    if deadline is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline for this frame passed")
        sock.settimeout(left)
    return sock.recv_into(view)


def _recv_exactly(sock: socket.socket, n: int, *, at_start: bool = False, deadline: float | None = None) -> bytearray:
    def closed(got: int) -> ConnectionClosed:
        where = "before a frame" if at_start and got == 0 else f"after {got} of {n} bytes"
        return ConnectionClosed(f"connection closed by the peer {where}")

    if n <= RECV_CHUNK:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            count = _recv_into(sock, view[got:], deadline)
            if count == 0:
                raise closed(got)
            got += count
        return buf
    buf = bytearray()  # grows with what arrives: the claimed length allocates nothing
    chunk = memoryview(bytearray(RECV_CHUNK))
    while len(buf) < n:
        count = _recv_into(sock, chunk[: min(RECV_CHUNK, n - len(buf))], deadline)
        if count == 0:
            raise closed(len(buf))
        buf += chunk[:count]
    return buf


def read_prefix(sock: socket.socket, max_bytes: int, deadline: float | None = None) -> tuple[int, int]:
    """Header and payload lengths of the next frame, after checking magic, version and size."""
    prefix = _recv_exactly(sock, PREFIX.size, at_start=True, deadline=deadline)
    magic, version, _, head_len, payload_len = PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise MalformedFrame(f"not an rlflow backend frame (magic {bytes(magic)!r}, expected {MAGIC!r})")
    if version != PROTOCOL_VERSION:
        raise ProtocolMismatch(
            f"protocol version mismatch: peer speaks version {version}, this side speaks version "
            f"{PROTOCOL_VERSION} (run the same rlflow version on both sides)"
        )
    size = PREFIX.size + head_len + payload_len
    if size > max_bytes:
        raise FrameTooLarge(
            f"message of {size} bytes exceeds max_message_bytes={max_bytes} "
            "(send smaller batches, or raise max_message_bytes in the resource config)"
        )
    return head_len, payload_len


def recv_frame(
    sock: socket.socket, max_bytes: int, deadline: float | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor], int]:
    """Read one frame: (header, tensors, bytes received); ``deadline`` bounds the whole frame."""
    head_len, payload_len = read_prefix(sock, max_bytes, deadline)
    try:
        header = unpack(bytes(_recv_exactly(sock, head_len, deadline=deadline)))
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise MalformedFrame(f"frame header is not valid msgpack: {exc}") from None
    if not isinstance(header, dict):
        raise MalformedFrame(f"frame header must be a map, got {type(header).__name__}")
    payload = _recv_exactly(sock, payload_len, deadline=deadline) if payload_len else bytearray()
    tensors = _decode_tensors(header.get("tensors", []), payload)
    return header, tensors, PREFIX.size + head_len + payload_len


def _decode_tensors(descriptors: Any, payload: bytearray) -> dict[str, torch.Tensor]:
    if not isinstance(descriptors, list):
        raise MalformedFrame("frame header field 'tensors' must be a list of descriptors")
    tensors: dict[str, torch.Tensor] = {}
    offset = 0
    for desc in descriptors:
        name, dtype, shape, nbytes = _check_descriptor(desc)
        if offset + nbytes > len(payload):
            raise MalformedFrame(f"tensor {name!r} claims {nbytes} bytes past the end of a {len(payload)}-byte payload")
        numel = nbytes // dtype.itemsize
        if numel:
            tensors[name] = torch.frombuffer(payload, dtype=dtype, count=numel, offset=offset).reshape(shape)
        else:
            tensors[name] = torch.empty(shape, dtype=dtype)
        offset += nbytes + _padded(nbytes)
    if offset != len(payload):
        raise MalformedFrame(f"payload holds {len(payload)} bytes but the descriptors account for {offset}")
    return tensors


def _check_descriptor(desc: Any) -> tuple[str, torch.dtype, list[int], int]:
    try:
        name, dtype_name, shape, nbytes = desc["name"], desc["dtype"], desc["shape"], desc["nbytes"]
    except (TypeError, KeyError):
        raise MalformedFrame(f"bad tensor descriptor {desc!r}: needs name, dtype, shape, nbytes") from None
    dtype = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None:
        raise MalformedFrame(f"tensor {name!r}: unknown dtype {dtype_name!r}; known: {', '.join(DTYPES)}")
    if not (isinstance(shape, list) and all(_is_count(d) for d in shape)):
        raise MalformedFrame(f"tensor {name!r}: shape must be a list of non-negative ints, got {shape!r}")
    numel = 1
    for d in shape:
        numel *= d
    if not _is_count(nbytes) or nbytes != numel * dtype.itemsize:
        raise MalformedFrame(f"tensor {name!r}: {nbytes!r} bytes do not match shape {shape} of {dtype_name}")
    return str(name), dtype, shape, nbytes


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def batch_to_wire(batch: Batch) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(header part, tensors) of a Batch; the header part keeps non-tensors and metrics."""
    return {"non_tensors": batch.non_tensors, "metrics": batch.metrics}, dict(batch.tensors)


def batch_from_wire(part: Any, tensors: dict[str, torch.Tensor]) -> Batch:
    if (
        not isinstance(part, dict)
        or not isinstance(part.get("non_tensors"), dict)
        or not isinstance(part.get("metrics"), dict)
    ):
        raise MalformedFrame("frame field 'batch' must be a map with 'non_tensors' and 'metrics' maps")
    try:
        return Batch(dict(tensors), {k: list(v) for k, v in part["non_tensors"].items()}, dict(part["metrics"]))
    except (TypeError, ValueError) as exc:
        raise MalformedFrame(f"frame does not hold a valid batch: {exc}") from None
