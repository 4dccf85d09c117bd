"""The ``reference`` remote backend: a real server process that owns the model, and its client.

``from_config`` starts the server (the driver) or only connects to it (each forwarder, or any client of a
server started by hand). Torch is imported only when a backend is really created.
Design notes: docs/design/remote_reference.md.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from rlflow.backends.remote.base import RemoteBackend, check_main_config
from rlflow.backends.remote.config import ReferenceConfig, ServeConfig
from rlflow.errors import BackendError
from rlflow.io import read_bytes

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.backends.remote.client import BackendClient
    from rlflow.batch import Batch

NAME = "reference"
HANDLE_BYTES = 64 << 10  # a handle is a few hundred bytes of JSON: host, port, token


class ReferenceBackend(RemoteBackend):
    """Client of a reference server; starts that server when it is the driver's instance."""

    single_forwarder = True
    accepts_rollout_weights = True
    runs_agent_loop = True  # the server's LocalEngine runs the agent loop, its tools in the server's project root
    config_model = ReferenceConfig

    def __init__(
        self,
        client: BackendClient,
        *,
        process: subprocess.Popen | None = None,
        workdir: Path | None = None,
        log_path: Path | None = None,
    ) -> None:
        self._client = client
        self._process = process  # set only on the instance that started the server
        self._workdir = workdir
        self._log_path = log_path
        self._destroyed = False

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def from_config(cls, main_config: dict[str, Any], *, handle: dict[str, Any] | None = None) -> ReferenceBackend:
        config = _parse_config(main_config)
        if handle is None and config.handle is not None:
            handle = config.handle
        if handle is None and config.handle_file is not None:
            handle = _read_handle_file(config.handle_file, main_config["project_root"])
        if handle is not None:
            backend = cls(_client(handle, config))
            backend._client.connect()
            return backend
        return cls._start(main_config, config)

    @classmethod
    def _start(cls, main_config: dict[str, Any], config: ReferenceConfig) -> ReferenceBackend:
        workdir = Path(config.log_dir or tempfile.mkdtemp(prefix="rlflow-backend-"))
        workdir.mkdir(parents=True, exist_ok=True)
        log_path = _log_path(main_config, config, workdir)
        try:
            process, handle = _launch(main_config, config, workdir, log_path)
        except BaseException:
            _tidy(workdir)
            raise
        backend = cls(_client(handle, config), process=process, workdir=workdir, log_path=log_path)
        try:
            backend._client.connect()
        except BaseException:
            backend.destroy()
            raise
        return backend

    def reconnect_handle(self) -> dict[str, Any]:
        return dict(self._client.handle)

    def destroy(self) -> None:
        """Disconnect; the instance that started the server also stops it (politely, then by signal)."""
        if self._destroyed:
            return
        self._destroyed = True
        process = self._process
        grace_s = 2.0
        if process is not None and process.poll() is None:
            try:
                self._client.call("shutdown", retries=0)
                grace_s = 15.0  # acknowledged: let it finish in its own time
            except BackendError:
                pass  # already gone or wedged: the signals below settle it
        self._client.close()
        if process is not None:
            _stop(process, grace_s)
            if self._workdir is not None:
                _tidy(self._workdir)

    def close(self) -> None:
        """Drop this instance's connection (a forwarder shutting down); the server keeps running."""
        self._client.close()

    @property
    def log_path(self) -> Path | None:
        """The started server's log (None when this instance joined a running server)."""
        return self._log_path

    def traffic(self) -> dict[str, float]:
        """Bytes through this client, in total and per method (see BackendClient.traffic)."""
        return self._client.traffic()

    # -- Engine ------------------------------------------------------------------------------

    def generate(self, batch: Batch, params: dict[str, Any]) -> Batch:
        return self._batch_call("generate", batch, params)

    def compute_log_prob(self, batch: Batch, params: dict[str, Any]) -> Batch:
        return self._batch_call("compute_log_prob", batch, params)

    def compute_ref_log_prob(self, batch: Batch, params: dict[str, Any]) -> Batch:
        return self._batch_call("compute_ref_log_prob", batch, params)

    def update_actor(self, batch: Batch, params: dict[str, Any]) -> dict[str, float]:
        metrics = self._client.call("update_actor", {"params": params}, batch)
        return {**metrics, **self._client.totals()}

    def update_weights(self, global_steps: int) -> dict[str, float]:
        metrics = self._client.call("update_weights", {"global_steps": int(global_steps)})
        return {**metrics, **self._client.totals()}

    def set_global_steps(self, global_steps: int) -> None:
        self._client.call("set_global_steps", {"global_steps": int(global_steps)})

    def load_rollout_weights(self, state: dict[str, Any], global_steps: int) -> dict[str, float]:
        """The parts of one transfer, in order; the server loads them whole with the last part."""
        import uuid

        from rlflow.backends.remote.weights import split_weights

        start = time.perf_counter()
        parts = split_weights(state, self._client.max_message_bytes)
        args = {"global_steps": int(global_steps), "transfer": uuid.uuid4().hex, "parts": len(parts)}
        metrics: dict[str, float] = {}
        for i, part in enumerate(parts):
            metrics = self._client.call("load_rollout_weights", {**args, "part": i}, tensors=part)
        size = sum(t.numel() * t.element_size() for t in state.values())
        return {
            **metrics,
            "sync/bytes": float(size),
            "sync/seconds": time.perf_counter() - start,
            **self._client.totals(),
        }

    def save_checkpoint(self, path: str, global_steps: int) -> dict[str, Any]:
        return self._client.call("save_checkpoint", {"path": str(path), "global_steps": int(global_steps)})

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        return self._client.call("load_checkpoint", {"path": str(path)})

    def _batch_call(self, method: str, batch: Batch, params: dict[str, Any]) -> Batch:
        out = self._client.call(method, {"params": params}, batch)
        out.metrics.update(self._client.totals())
        return out


def _parse_config(main_config: dict[str, Any]) -> ReferenceConfig:
    raw = check_main_config(main_config, NAME)
    try:
        return ReferenceConfig.model_validate(raw)
    except ValidationError as exc:
        resource = main_config["resource"]
        problems = "; ".join(
            f"resources.{resource}.config.{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
            for e in exc.errors()
        )
        raise BackendError(f"remote backend {NAME!r}: invalid config: {problems}") from None


def _client(handle: dict[str, Any], config: ReferenceConfig) -> BackendClient:
    from rlflow.backends.remote.client import BackendClient

    return BackendClient(
        handle,
        backend=NAME,
        retries=config.retries,
        backoff_s=config.backoff_s,
        connect_timeout_s=config.connect_timeout_s,
        call_timeout_s=config.call_timeout_s,
        max_message_bytes=config.max_message_bytes,
    )


def _read_handle_file(path: str, project_root: str) -> dict[str, Any]:
    """The handle in ``path``, read by the bounded reader: a FIFO in its place is refused, never waited on."""
    file = Path(path) if Path(path).is_absolute() else Path(project_root) / path
    try:
        handle = json.loads(read_bytes(file, HANDLE_BYTES, "handle file"))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise BackendError(
            f"remote backend {NAME!r}: cannot read handle_file {str(file)!r}: {why} "
            "(`rlflow backend serve --handle-file PATH` writes it)"
        ) from None
    if not isinstance(handle, dict):
        raise BackendError(
            f"remote backend {NAME!r}: handle_file {str(file)!r} holds a JSON {type(handle).__name__}, not the "
            "handle object (`rlflow backend serve --handle-file PATH` writes it)"
        )
    return handle


def _log_path(main_config: dict[str, Any], config: ReferenceConfig, workdir: Path) -> Path:
    """``<log_dir>/server.log`` when the config names a folder, else ``<run_dir>/backends/<resource>.log``
    in a run (beside its metrics, kept with it), else ``server.log`` in the temporary workdir."""
    run_dir = main_config["run_dir"]
    if config.log_dir is not None or run_dir is None:
        return workdir / "server.log"
    folder = Path(run_dir) / "backends"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{main_config['resource']}.log"


def _tidy(workdir: Path) -> None:
    """Remove the files that hold the token, and the workdir itself once nothing else (a log) is in it."""
    for name in ("serve.json", "handle.json"):
        (workdir / name).unlink(missing_ok=True)
    try:
        workdir.rmdir()
    except OSError:  # it holds the log (kept for the post-mortem) or other files
        pass


def _launch(
    main_config: dict[str, Any], config: ReferenceConfig, workdir: Path, log_path: Path
) -> tuple[subprocess.Popen, dict]:
    """Start the server process and wait for its handle; on any failure nothing is left running."""
    serve = ServeConfig(
        main_config=main_config, backend=NAME, token=secrets.token_urlsafe(32), **config.server_settings()
    )
    config_path, handle_path = workdir / "serve.json", workdir / "handle.json"
    handle_path.unlink(missing_ok=True)
    fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(serve.model_dump_json())
    cmd = [
        sys.executable,
        "-m",
        "rlflow.backends.remote.server",
        "--config",
        str(config_path),
        "--handle-file",
        str(handle_path),
        "--parent-pid",
        str(os.getpid()),
    ]
    root = Path(main_config["project_root"])
    with open(log_path, "ab") as log:
        # its own session: a Ctrl-C at the driver's terminal reaches the driver, whose destroy() stops us
        process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=root if root.is_dir() else None,
            start_new_session=True,
        )
    try:
        handle = _wait_for_handle(process, handle_path, log_path, config.startup_timeout_s)
    except BaseException:
        _stop(process, grace_s=0)
        config_path.unlink(missing_ok=True)
        raise
    config_path.unlink(missing_ok=True)  # the server has read it; the token now lives in memory only
    return process, handle


def _wait_for_handle(process: subprocess.Popen, handle_path: Path, log_path: Path, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if handle_path.exists():
            return json.loads(handle_path.read_text())
        code = process.poll()
        if code is not None:
            raise BackendError(
                f"remote backend {NAME!r}: the server process exited with code {code} during start-up; "
                f"last lines of {log_path}:\n{_tail(log_path)}"
            )
        time.sleep(0.05)
    raise BackendError(
        f"remote backend {NAME!r}: the server did not come up within startup_timeout_s={timeout_s:g} "
        f"(raise it in the resource config); last lines of {log_path}:\n{_tail(log_path)}"
    )


def _stop(process: subprocess.Popen, grace_s: float = 15.0) -> None:
    """Wait ``grace_s`` for a clean exit (after a shutdown request), then SIGTERM, then SIGKILL."""
    for action, wait_s in ((None, grace_s), (process.terminate, 5.0), (process.kill, 5.0)):
        if action is not None:
            action()
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(log unreadable: {exc})"
