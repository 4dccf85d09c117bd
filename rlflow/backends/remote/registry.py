"""The remote-backend registry: built-in ``reference`` plus plugins, and the calls that create backends.

``reference`` is named by its import path and imported on first ``get``. ``create_backend`` turns a
plugin's failure to start into one ``BackendError`` and leaves nothing running.
Design notes: docs/design/registries.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rlflow.backends.remote.base import RemoteBackend, check_main_config
from rlflow.errors import BackendError, RegistryError
from rlflow.registry import Registry

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "rlflow.remote_backends"
REMOTE_BACKENDS: Registry = Registry(
    "remote backend",
    ENTRY_POINT_GROUP,
    f"Plugins add remote backends through the `{ENTRY_POINT_GROUP}` entry-point group (pip install the "
    "plugin package) or a module listed under `plugins:` in rlflow.yaml that calls "
    "rlflow.backends.remote.register(name) on import.",
)


def register(name: str) -> Callable[[type[RemoteBackend]], type[RemoteBackend]]:
    """Class decorator: ``@register("mine") class Mine(RemoteBackend): ...``."""

    def add(cls: type[RemoteBackend]) -> type[RemoteBackend]:
        _check_class(name, cls)
        REMOTE_BACKENDS.register(name, cls)
        return cls

    return add


def get(name: str) -> type[RemoteBackend]:
    """The backend class registered under ``name`` (entry points load on first use)."""
    cls = REMOTE_BACKENDS.get(name)
    _check_class(name, cls)
    return cls


def list_backends() -> list[str]:
    return REMOTE_BACKENDS.names()


def forwarder_problem(name: str, single_forwarder: bool, forwarders: int) -> str | None:
    """Why ``forwarders`` cannot relay to backend ``name``, or None. The validator and the runtime both ask."""
    if single_forwarder and forwarders != 1:
        return f"remote backend {name!r} takes a single forwarder; got forwarders: {forwarders} (set forwarders: 1)"
    return None


def create_backend(name: str, main_config: dict[str, Any]) -> RemoteBackend:
    """Start backend ``name`` (driver side, once per run); a failure is a BackendError naming it."""
    cls = get(name)
    _validate_config(name, cls, main_config)
    before = _descendants()
    try:
        backend = cls.from_config(main_config)
    except BaseException as exc:
        stopped = _stop_new_processes(before)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise _start_error(name, cls, exc, stopped) from exc
    _check_instance(name, cls, backend)
    return backend


def connect_backend(name: str, main_config: dict[str, Any], handle: dict[str, Any]) -> RemoteBackend:
    """Reconnect to a running backend from its ``reconnect_handle()`` (forwarder side; starts nothing)."""
    cls = get(name)
    check_main_config(main_config, name)
    if not isinstance(handle, dict):
        raise BackendError(f"remote backend {name!r}: the reconnect handle must be a dict, got {type(handle).__name__}")
    try:
        backend = cls.from_config(main_config, handle=handle)
    except BackendError:
        raise
    except Exception as exc:
        raise BackendError(f"remote backend {name!r} could not reconnect: {type(exc).__name__}: {exc}") from exc
    _check_instance(name, cls, backend)
    return backend


def _check_class(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, RemoteBackend)):
        raise RegistryError(
            f"remote backend {name!r} must be a subclass of rlflow.backends.remote.RemoteBackend, "
            f"got {cls!r} (fix the plugin's registration or its `{ENTRY_POINT_GROUP}` entry point)"
        )
    for flag in ("single_forwarder", "accepts_rollout_weights", "runs_agent_loop"):
        if not isinstance(getattr(cls, flag), bool):
            raise RegistryError(f"remote backend {name!r}: {flag} must be a bool class attribute")


def _check_instance(name: str, cls: type, backend: Any) -> None:
    if not isinstance(backend, RemoteBackend):
        raise BackendError(
            f"remote backend {name!r}: {cls.__qualname__}.from_config returned {type(backend).__name__}, "
            "not a RemoteBackend instance"
        )


def _validate_config(name: str, cls: type[RemoteBackend], main_config: dict[str, Any]) -> None:
    config = check_main_config(main_config, name)
    if cls.config_model is None:
        return
    from pydantic import ValidationError

    try:
        cls.config_model.model_validate(config)
    except ValidationError as exc:
        resource = main_config["resource"]
        problems = "; ".join(
            f"resources.{resource}.config.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise BackendError(f"remote backend {name!r}: invalid config: {problems}") from None


def _start_error(name: str, cls: type, exc: BaseException, stopped: list[str]) -> BackendError:
    own = f"remote backend {name!r}: "
    detail = str(exc).removeprefix(own) if isinstance(exc, BackendError) else f"{type(exc).__name__}: {exc}"
    cleanup = f"; stopped {len(stopped)} process(es) it left behind ({', '.join(stopped)})" if stopped else ""
    return BackendError(
        f"remote backend {name!r} ({cls.__module__}.{cls.__qualname__}) failed to start: {detail}{cleanup}"
    )


def _descendants() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def _stop_new_processes(before: set[int]) -> list[str]:
    """Terminate (then kill) descendants of this process that a failed from_config left behind."""
    import psutil

    new = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    names = []
    for proc in new:
        try:
            names.append(f"pid {proc.pid} {proc.name()}")
            proc.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(new, timeout=5)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    if names:
        log.warning("stopped processes left behind by a failed backend start: %s", ", ".join(names))
    return names


REMOTE_BACKENDS.register_lazy("reference", "rlflow.backends.remote.reference:ReferenceBackend")
