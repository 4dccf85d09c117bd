"""The client end of the wire: one authenticated connection, calls with bounded retries, traffic counts.

A forwarder holds one ``BackendClient``; a call lost with its connection is retried with the same call id,
what the server answers never is. Design notes: docs/design/remote_reference.md.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter
from typing import Any

from rlflow.backends.remote import wire
from rlflow.batch import Batch
from rlflow.errors import BackendError, RemoteCallFailed

HANDLE_KEYS = ("host", "port", "token", "protocol")


def check_handle(handle: Any, backend: str) -> dict[str, Any]:
    """A handle's fields, checked, with a clear error for a stale or foreign one."""
    if not isinstance(handle, dict) or any(key not in handle for key in HANDLE_KEYS):
        got = f"keys {sorted(handle)}" if isinstance(handle, dict) else type(handle).__name__  # never echo a token
        raise BackendError(
            f"remote backend {backend!r}: a reconnect handle needs {', '.join(HANDLE_KEYS)}; got {got} "
            "(use the JSON that `rlflow backend serve` prints or the backend's reconnect_handle())"
        )
    if handle["protocol"] != wire.PROTOCOL_VERSION:
        raise wire.ProtocolMismatch(
            f"remote backend {backend!r}: protocol version mismatch: the handle's server speaks version "
            f"{handle['protocol']}, this client speaks version {wire.PROTOCOL_VERSION} (run the same rlflow on both sides)"
        )
    return handle


class BackendClient:
    """Calls on one backend server; thread-safe, reconnecting, counting bytes."""

    def __init__(
        self,
        handle: dict[str, Any],
        *,
        backend: str = "reference",
        retries: int = 3,
        backoff_s: float = 0.5,
        connect_timeout_s: float = 10.0,
        call_timeout_s: float | None = None,
        max_message_bytes: int = wire.DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.handle = check_handle(handle, backend)
        self.backend = backend
        self.address = f"{handle['host']}:{handle['port']}"
        self.retries = retries
        self.backoff_s = backoff_s
        self.connect_timeout_s = connect_timeout_s
        self.call_timeout_s = call_timeout_s
        self.max_message_bytes = max_message_bytes
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._sent: Counter[str] = Counter()
        self._received: Counter[str] = Counter()
        self._calls: Counter[str] = Counter()
        self.reconnects = 0

    def _where(self, method: str) -> str:
        return f"remote backend {self.backend!r} at {self.address}, {method}"

    # -- connection --------------------------------------------------------------------------

    def connect(self) -> None:
        """Open and authenticate the connection now (a start-up check); calls also connect lazily."""
        with self._lock:
            self._connected("connect")

    def _connected(self, method: str) -> socket.socket:
        if self._sock is not None:
            return self._sock
        sock = socket.create_connection((self.handle["host"], int(self.handle["port"])), timeout=self.connect_timeout_s)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = wire.encode({"kind": "hello", "token": self.handle["token"], "client": f"pid {os.getpid()}"})
            self._sent["hello"] += wire.send_frame(sock, hello, self.max_message_bytes)
            reply, _, size = wire.recv_frame(sock, self.max_message_bytes)
            self._received["hello"] += size
            if reply.get("kind") != "welcome":
                raise self._answer_error(reply, method)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(self.call_timeout_s)
        self._sock = sock
        return sock

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    # -- calls -------------------------------------------------------------------------------

    def call(
        self,
        method: str,
        args: dict[str, Any] | None = None,
        batch: Batch | None = None,
        *,
        tensors: dict[str, Any] | None = None,
        retries: int | None = None,
    ) -> Any:
        """Run ``method`` on the server; a Batch reply comes back as a Batch, anything else as plain data.

        ``tensors`` (without ``batch``): named tensors of any shapes, such as a part of a weight transfer.
        """
        header: dict[str, Any] = {"kind": "call", "method": method, "id": uuid.uuid4().hex, "args": args or {}}
        if batch is not None:
            header["batch"], tensors = wire.batch_to_wire(batch)
        buffers = wire.encode(header, tensors)
        size = wire.frame_size(buffers)
        if size > self.max_message_bytes:
            raise wire.FrameTooLarge(
                f"{self._where(method)}: message of {size} bytes exceeds max_message_bytes={self.max_message_bytes} "
                "(send smaller batches, or raise max_message_bytes in the resource config)"
            )
        with self._lock:
            reply, reply_tensors = self._exchange(method, buffers, self.retries if retries is None else retries)
        if reply.get("kind") == "error" or reply.get("id") != header["id"]:
            raise self._answer_error(reply, method)
        self._calls[method] += 1
        if "batch" in reply:
            return wire.batch_from_wire(reply["batch"], reply_tensors)
        return reply.get("value")

    def _exchange(self, method: str, buffers: list, retries: int) -> tuple[dict[str, Any], dict[str, Any]]:
        failure: BaseException | None = None
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
                self.reconnects += 1
            try:
                sock = self._connected(method)
            except OSError as exc:  # refused or timed out: the server may be restarting; retry
                failure = exc
                continue
            try:
                self._sent[method] += wire.send_frame(sock, buffers, self.max_message_bytes)
                reply, tensors, size = wire.recv_frame(sock, self.max_message_bytes)
                self._received[method] += size
                return reply, tensors
            except TimeoutError as exc:  # the call may still be running: retrying would only queue behind it
                self._drop()
                raise BackendError(
                    f"{self._where(method)}: no answer within call_timeout_s={self.call_timeout_s}"
                ) from exc
            except OSError as exc:  # reset, broken pipe, EOF (wire.ConnectionClosed): reconnect and retry
                self._drop()
                failure = exc
            except BaseException:
                self._drop()
                raise
        raise BackendError(
            f"{self._where(method)}: the server is unreachable after {retries + 1} attempt(s): "
            f"{type(failure).__name__}: {failure} (is the backend process still running?)"
        ) from failure

    def _answer_error(self, reply: dict[str, Any], method: str) -> BackendError | RemoteCallFailed:
        error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
        if reply.get("kind") != "error":
            return wire.MalformedFrame(f"{self._where(method)}: unexpected reply {reply.get('kind')!r}")
        kind, message = error.get("type", "Error"), error.get("message", "")
        trace = f"\nserver traceback (tail):\n{error['traceback']}" if error.get("traceback") else ""
        cls = {
            "AuthError": wire.AuthError,
            "ProtocolMismatch": wire.ProtocolMismatch,
            "FrameTooLarge": wire.FrameTooLarge,
            "MalformedFrame": wire.MalformedFrame,
            "ServerBusy": wire.WireError,  # over max_connections: a refusal of the connection, not of the call
        }.get(kind, RemoteCallFailed)
        return cls(f"{self._where(method)}: the server answered {kind}: {message}{trace}")

    # -- accounting --------------------------------------------------------------------------

    def traffic(self) -> dict[str, float]:
        """Bytes through this client: totals (the metrics) and per method."""
        out: dict[str, float] = {
            "forwarder/bytes_sent": float(sum(self._sent.values())),
            "forwarder/bytes_received": float(sum(self._received.values())),
            "forwarder/calls": float(sum(self._calls.values())),
            "forwarder/reconnects": float(self.reconnects),
        }
        for method in sorted(set(self._sent) | set(self._received)):
            out[f"forwarder/bytes_sent/{method}"] = float(self._sent[method])
            out[f"forwarder/bytes_received/{method}"] = float(self._received[method])
        return out

    def totals(self) -> dict[str, float]:
        traffic = self.traffic()
        return {k: traffic[k] for k in ("forwarder/bytes_sent", "forwarder/bytes_received")}
