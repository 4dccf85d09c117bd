"""The reference backend's server: one Engine behind an authenticated TCP socket.

Runs as its own process (``python -m rlflow.backends.remote.server --config FILE``, started by the
``reference`` client or ``rlflow backend serve``) or on a thread in tests. Design notes:
docs/design/remote_server.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import logging
import os
import signal
import socket
import socketserver
import sys
import threading
import time
import traceback
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlflow.backends.engine import Engine
from rlflow.backends.remote import wire
from rlflow.backends.remote.refusals import RefusalLog
from rlflow.backends.remote.weights import WeightStaging, floats, load_pushed, staging_limit
from rlflow.batch import Batch
from rlflow.errors import BackendError, RlflowError

log = logging.getLogger("rlflow.backends.remote.server")

HELLO_MAX_BYTES = 64 * 1024
DRAIN_TIMEOUT_S = 1.0
DRAIN_MAX_BYTES = 4 << 20
ACCEPT_BACKLOG = 128  # pending accepts the kernel queues: a client waits its turn behind a crowd, not SYN retries
EVICT_JOIN_S = 1.0  # how long accepting waits for an evicted handshake's thread to exit


class ServerBusy(wire.WireError):
    """The server already serves ``max_connections`` connections."""


def _arg(args: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = args.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise BackendError(f"argument {name!r} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


@dataclass(frozen=True)
class Method:
    run: Callable[[Engine, dict[str, Any], Any], Any]
    takes_batch: bool = False
    remembered: bool = False  # changes state: replies are remembered by call id, never re-applied
    takes_weights: bool = False  # one part of a rollout-weights transfer: its tensors are staged


METHODS: dict[str, Method] = {
    "generate": Method(lambda e, a, b: e.generate(b, _arg(a, "params", dict)), takes_batch=True),
    "compute_log_prob": Method(lambda e, a, b: e.compute_log_prob(b, _arg(a, "params", dict)), takes_batch=True),
    "compute_ref_log_prob": Method(
        lambda e, a, b: e.compute_ref_log_prob(b, _arg(a, "params", dict)), takes_batch=True
    ),
    "update_actor": Method(
        lambda e, a, b: floats(e.update_actor(b, _arg(a, "params", dict))), takes_batch=True, remembered=True
    ),
    "update_weights": Method(lambda e, a, b: floats(e.update_weights(_arg(a, "global_steps", int))), remembered=True),
    "load_rollout_weights": Method(load_pushed, remembered=True, takes_weights=True),
    "set_global_steps": Method(lambda e, a, b: e.set_global_steps(_arg(a, "global_steps", int))),
    "save_checkpoint": Method(lambda e, a, b: e.save_checkpoint(_arg(a, "path", str), _arg(a, "global_steps", int))),
    "load_checkpoint": Method(lambda e, a, b: e.load_checkpoint(_arg(a, "path", str))),
}
ADMIN = ("ping", "shutdown")


def error_header(exc: BaseException, call_id: Any = None, *, tb: bool = False) -> dict[str, Any]:
    detail = "".join(traceback.format_exception(exc)[-8:]) if tb else ""
    return {
        "kind": "error",
        "id": call_id,
        "error": {"type": type(exc).__name__, "message": str(exc), "traceback": detail},
    }


class BackendServer:
    """Serves one Engine to authenticated clients; ``serve_forever`` or ``start_in_thread``."""

    def __init__(
        self,
        engine: Engine,
        *,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        max_message_bytes: int = wire.DEFAULT_MAX_MESSAGE_BYTES,
        remember_calls: int = 64,
        backend: str = "reference",
        handshake_timeout_s: float = 10.0,
        max_connections: int = 64,
        max_handshakes: int = 16,
        idle_timeout_s: float | None = 3600.0,
        advertise_host: str | None = None,
    ) -> None:
        if not token:
            raise BackendError("the backend server needs a non-empty token")
        self.engine = engine
        self.token = token
        self.backend = backend
        self.max_message_bytes = max_message_bytes
        self.remember_calls = remember_calls
        self.handshake_timeout_s = handshake_timeout_s
        self.max_connections = max_connections
        self.max_handshakes = max_handshakes
        self.idle_timeout_s = idle_timeout_s
        self._served: set[socket.socket] = set()  # authenticated connections
        self._handshaking: OrderedDict[socket.socket, None] = OrderedDict()  # not yet authenticated, oldest first
        self.evicted = 0  # unauthenticated connections cut to make room for a newer one
        self.executed: Counter[str] = Counter()  # engine calls actually run, per method
        self.refused = 0
        self.refusals = RefusalLog(log)
        self._engine_lock = threading.Lock()
        self._remembered: OrderedDict[str, list] = OrderedDict()
        self._staging = WeightStaging(staging_limit(engine))  # guarded by the engine lock
        self._connections: dict[socket.socket, threading.Thread] = {}  # open client connections -> their handler
        self._connections_lock = threading.Lock()
        self._tcp = (_TCPServer6 if ":" in host else _TCPServer)((host, port), _Handler)
        self._tcp.owner = self
        self.host = advertise_host or (socket.gethostname() if host in ("0.0.0.0", "::", "") else host)
        self.port = int(self._tcp.server_address[1])
        self._thread: threading.Thread | None = None

    def handle(self) -> dict[str, Any]:
        """What a client needs to join: address, token, pid and protocol version (JSON-able)."""
        return {
            "backend": self.backend,
            "host": self.host,
            "port": self.port,
            "token": self.token,
            "pid": os.getpid(),
            "protocol": wire.PROTOCOL_VERSION,
        }

    def serve_forever(self) -> None:
        log.info("serving backend %r on %s:%d (pid %d)", self.backend, self.host, self.port, os.getpid())
        try:
            self._tcp.serve_forever(poll_interval=0.2)
        finally:
            self._tcp.server_close()
            self._end_connections()

    def _end_connections(self, timeout_s: float = 10.0) -> None:
        """Close every client connection and wait for its handler thread.

        A handler thread still alive at interpreter exit is killed inside whatever native call it
        is in, which can abort the process; so the server never exits with one running.
        """
        with self._connections_lock:
            live = list(self._connections.items())
        for sock, _ in live:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout_s
        for _, thread in live:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("a connection handler is still busy after %.0f s; exiting anyway", timeout_s)

    def _track(self, sock: socket.socket, live: bool) -> None:
        with self._connections_lock:
            if live:
                self._connections[sock] = threading.current_thread()
            else:
                self._connections.pop(sock, None)

    def _arrive(self, sock: socket.socket) -> None:
        """Count a new connection as unauthenticated; when their cap is full, cut the oldest of them."""
        with self._connections_lock:
            self._handshaking[sock] = None
            oldest = self._handshaking.popitem(last=False)[0] if len(self._handshaking) > self.max_handshakes else None
        if oldest is None:
            return
        self.evicted += 1
        with contextlib.suppress(OSError):  # its handler's read ends at once and the thread exits
            oldest.shutdown(socket.SHUT_RDWR)
        with self._connections_lock:
            handler = self._connections.get(oldest)
        if handler is not None:  # wait (milliseconds) for it, so the newcomer's thread never adds to the cap
            handler.join(timeout=EVICT_JOIN_S)

    def _authenticated(self, sock: socket.socket) -> bool | None:
        """Move an authenticated connection to the served ones: True, False when ``max_connections`` are
        served already (it keeps its unauthenticated slot while it is answered), None if it was cut meanwhile."""
        with self._connections_lock:
            if sock not in self._handshaking:
                return None
            if len(self._served) >= self.max_connections:
                return False
            del self._handshaking[sock]
            self._served.add(sock)
            return True

    def _leave(self, sock: socket.socket) -> None:
        with self._connections_lock:
            self._handshaking.pop(sock, None)
            self._served.discard(sock)

    def busy(self) -> ServerBusy:
        """The refusal an authenticated connection over ``max_connections`` gets."""
        return ServerBusy(
            f"the backend server already serves max_connections={self.max_connections} connections; "
            "stop idle clients or raise max_connections in the resource config"
        )

    def start_in_thread(self) -> BackendServer:
        self._thread = threading.Thread(target=self.serve_forever, name="rlflow-backend-server", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop accepting and end serve_forever (call from any thread but serve_forever's own)."""
        self._tcp.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- called by connection handlers -------------------------------------------------------

    def check_hello(self, header: dict[str, Any]) -> None:
        if header.get("kind") != "hello":
            raise wire.AuthError(f"the first frame must be 'hello' with the handle's token, got {header.get('kind')!r}")
        token = header.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self.token.encode()):
            raise wire.AuthError("authentication failed: missing or wrong token (use the backend's reconnect handle)")

    def execute(self, header: dict[str, Any], tensors: dict[str, Any]) -> list:
        """The encoded reply to one call frame; engine failures become error replies."""
        call_id = header.get("id")
        method = header.get("method")
        try:
            if header.get("kind") != "call":
                raise BackendError(f"expected a 'call' frame, got {header.get('kind')!r}")
            if method in ADMIN:
                return wire.encode({"kind": "result", "id": call_id, "value": self._admin(method)})
            spec = METHODS.get(method)
            if spec is None:
                raise BackendError(f"unknown method {method!r}; known: {', '.join([*METHODS, *ADMIN])}")
            args = header.get("args") or {}
            if not isinstance(args, dict):
                raise BackendError(f"{method}: 'args' must be a map")
            batch = wire.batch_from_wire(header.get("batch"), tensors) if spec.takes_batch else None
            if spec.takes_weights:
                _arg(args, "global_steps", int)
                batch = tensors
        except BackendError as exc:
            return wire.encode(error_header(exc, call_id))
        if not spec.remembered:
            with self._engine_lock:
                return self._run(spec, method, call_id, args, batch)
        if not isinstance(call_id, str) or not call_id:
            return wire.encode(error_header(BackendError(f"{method} needs a call id (a non-empty string)"), call_id))
        with self._engine_lock:
            if call_id in self._remembered:
                log.info("%s call %s was already applied; answering with the remembered reply", method, call_id)
                return self._remembered[call_id]
            reply = self._run(spec, method, call_id, args, batch)
            self._remembered[call_id] = reply
            while len(self._remembered) > self.remember_calls:
                self._remembered.popitem(last=False)
            return reply

    def _run(self, spec: Method, method: str, call_id: Any, args: dict[str, Any], batch: Any) -> list:
        self.executed[method] += 1
        try:
            if spec.takes_weights:
                batch = self._staging.add(args, batch)
            result = spec.run(self.engine, args, batch)
        except Exception as exc:
            log.exception("%s failed", method)
            return wire.encode(error_header(exc, call_id, tb=True))
        try:
            if isinstance(result, Batch):
                part, tensors = wire.batch_to_wire(result)
                return wire.encode({"kind": "result", "id": call_id, "batch": part}, tensors)
            return wire.encode({"kind": "result", "id": call_id, "value": result})
        except (TypeError, ValueError, BackendError) as exc:
            bad = BackendError(f"{method} returned a value the wire cannot carry: {exc}")
            return wire.encode(error_header(bad, call_id))

    def _admin(self, method: str) -> dict[str, Any]:
        if method == "shutdown":
            log.info("shutdown requested")
            threading.Thread(target=self._tcp.shutdown, name="rlflow-backend-shutdown", daemon=True).start()
        return {"pid": os.getpid(), "backend": self.backend, "protocol": wire.PROTOCOL_VERSION}


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = ACCEPT_BACKLOG
    owner: BackendServer

    def process_request(self, request, client_address) -> None:
        self.owner._arrive(request)
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.owner._leave(request)

    def handle_error(self, request, client_address) -> None:
        """One line for a connection that failed in a way no handler foresaw (not socketserver's traceback)."""
        exc = sys.exc_info()[1]
        self.owner.refusals.warning("dropped the connection from %s: %s: %s", client_address, type(exc).__name__, exc)


class _TCPServer6(_TCPServer):
    address_family = socket.AF_INET6


class _Handler(socketserver.BaseRequestHandler):
    server: _TCPServer

    def handle(self) -> None:
        owner = self.server.owner
        owner._track(self.request, True)
        try:
            self._handle(owner, self.request)
        finally:
            owner._track(self.request, False)

    def _handle(self, owner: BackendServer, sock: socket.socket) -> None:
        peer = "{}:{}".format(*self.client_address[:2])
        deadline = time.monotonic() + owner.handshake_timeout_s
        try:
            header, _, _ = wire.recv_frame(sock, HELLO_MAX_BYTES, deadline)
            owner.check_hello(header)
            served = owner._authenticated(sock)
            if served is None:
                return
            if not served:
                owner.refused += 1
                self._refuse(sock, peer, owner.busy())
                return
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            wire.send_frame(sock, wire.encode({"kind": "welcome", **owner._admin("ping")}), HELLO_MAX_BYTES)
        except wire.WireError as exc:
            owner.refused += 1
            self._refuse(sock, peer, exc)
            return
        except OSError as exc:  # closed, or no complete hello within handshake_timeout_s
            log.info("connection from %s ended before its hello: %s", peer, exc or "handshake timed out")
            return
        sock.settimeout(owner.idle_timeout_s)  # a forwarder idles between steps, but not for ever
        self._serve_calls(owner, sock, peer)

    def _serve_calls(self, owner: BackendServer, sock: socket.socket, peer: str) -> None:
        while True:
            try:
                header, tensors, _ = wire.recv_frame(sock, owner.max_message_bytes)
            except wire.WireError as exc:
                self._refuse(sock, peer, exc)
                return
            except TimeoutError:
                log.info("closing the connection from %s: silent for idle_timeout_s=%s", peer, owner.idle_timeout_s)
                return
            except OSError:  # includes ConnectionClosed: the client went away between calls
                return
            reply = owner.execute(header, tensors)
            try:
                wire.send_frame(sock, reply, owner.max_message_bytes)
            except wire.FrameTooLarge as exc:
                wire.send_frame(sock, wire.encode(error_header(exc, header.get("id"))), owner.max_message_bytes)
            except OSError:
                return  # the client retries on a new connection; remembered replies survive

    def _refuse(self, sock: socket.socket, peer: str, exc: wire.WireError) -> None:
        """Log (rate-limited), answer with the reason (best effort), and let the handler close the connection."""
        self.server.owner.refusals.warning("refused a frame from %s: %s", peer, exc)
        try:
            sock.settimeout(DRAIN_TIMEOUT_S)
            wire.send_frame(sock, wire.encode(error_header(exc)), HELLO_MAX_BYTES)
            # Closing with unread bytes would reset the connection and could destroy the answer
            # before the peer reads it: half-close, then drain a bounded amount, within one deadline
            # (a peer trickling bytes cannot hold the drain open).
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            drained = 0
            while drained < DRAIN_MAX_BYTES and (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass


# -- the server process ---------------------------------------------------------------------------


def build_engine(main_config: dict[str, Any], engine: str | None, device: str) -> Engine:
    """The engine the server owns: ``engine`` (``module:factory``) or the local engine with every role."""
    if engine:
        built = _load_factory(engine)(main_config)
    else:
        from rlflow.backends.local.local_engine import LocalEngine
        from rlflow.schemas.pipeline import Pipeline

        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        built = LocalEngine(
            Pipeline.model_validate(main_config["pipeline"]),
            device=device,
            rank=0,
            world_size=1,
            roles=frozenset({"actor", "rollout", "ref"}),
            project_root=Path(main_config["project_root"]),
        )
    if not isinstance(built, Engine):
        raise BackendError(f"engine factory {engine!r} returned {type(built).__name__}, not an rlflow Engine")
    return built


def _load_factory(spec: str) -> Callable[[dict[str, Any]], Engine]:
    import importlib

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise BackendError(f"engine {spec!r} must be 'module:factory'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise BackendError(f"engine factory {spec!r} cannot be loaded: {exc}") from exc


def write_handle(path: Path, handle: dict[str, Any]) -> None:
    """Atomically, readable by this user only (the handle holds the token)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(handle, out)
    os.replace(tmp, path)


def serve(
    config: Any, *, handle_file: Path | None = None, parent_pid: int | None = None, print_handle: bool = False
) -> None:
    """Build the engine, listen, announce the handle, serve until shut down (a ServeConfig in).

    The handle holds the token: it goes to ``handle_file`` (mode 0600) and, with
    ``print_handle``, to stdout; never into the log.
    """
    import secrets

    if config.num_threads:
        import torch

        torch.set_num_threads(config.num_threads)
    engine = build_engine(config.main_config, config.engine, config.device)
    server = BackendServer(
        engine,
        token=config.token or secrets.token_urlsafe(32),
        host=config.host,
        port=config.port,
        max_message_bytes=config.max_message_bytes,
        remember_calls=config.remember_calls,
        handshake_timeout_s=config.handshake_timeout_s,
        max_connections=config.max_connections,
        max_handshakes=config.max_handshakes,
        idle_timeout_s=config.idle_timeout_s,
        backend=config.backend,
        advertise_host=config.advertise_host,
    )
    stop = lambda *_: threading.Thread(target=server._tcp.shutdown, daemon=True).start()  # noqa: E731
    signal.signal(signal.SIGTERM, stop)
    # Ctrl-C stops the server even when it was started with SIGINT ignored (a parent that ignores
    # it, such as a shell running a background job or a test runner, passes that on to children).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if parent_pid is not None:
        threading.Thread(target=_watch_parent, args=(parent_pid, stop), daemon=True).start()
    handle = server.handle()
    try:  # a Ctrl-C right after the handle is announced stops the server as cleanly as a later one
        if handle_file is not None:
            write_handle(handle_file, handle)
        if print_handle:
            print(json.dumps(handle), flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("interrupted")
    finally:
        engine.close()
    log.info("backend %r on port %d stopped", config.backend, server.port)


def _watch_parent(parent_pid: int, stop: Callable[[], Any]) -> None:
    """Shut down when the process that started us is gone, so a killed driver leaks no server."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    log.warning("parent process %d is gone; shutting down", parent_pid)
    stop()


def main(argv: list[str] | None = None) -> int:
    from rlflow.backends.remote.config import ServeConfig

    parser = argparse.ArgumentParser(
        prog="python -m rlflow.backends.remote.server", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--config", required=True, type=Path, help="ServeConfig JSON file")
    parser.add_argument("--handle-file", type=Path, help="write the handle JSON here once serving")
    parser.add_argument("--parent-pid", type=int, help="shut down when this parent process exits")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ServeConfig.model_validate_json(args.config.read_text())
        serve(config, handle_file=args.handle_file, parent_pid=args.parent_pid)
    except RlflowError as exc:  # a known failure: its message says what to fix, no traceback needed
        log.error("the backend server failed: %s", exc)
        return 1
    except Exception:
        log.exception("the backend server failed")
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is closed by now; skip interpreter teardown, which takes seconds with torch
    # and transformers loaded and would only delay the destroy() waiting for this process.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
