"""``RemoteBackend``: the seam through which an out-of-process RL backend plugs into rlflow.

Design notes: docs/design/remote_backend_base.md.
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import threading
from collections.abc import Awaitable
from typing import Any, ClassVar

from rlflow.backends.engine import Engine
from rlflow.errors import BackendError

MAIN_CONFIG_KEYS = ("pipeline", "resource", "backend_config", "project_root", "run_dir")


class RemoteBackend(Engine):
    """An out-of-process backend that owns its own devices; rlflow talks to it through forwarders."""

    single_forwarder: ClassVar[bool] = False
    accepts_rollout_weights: ClassVar[bool] = False  # True: implements load_rollout_weights
    runs_agent_loop: ClassVar[bool] = False  # True: generate runs verl's multi_turn agent loop itself
    config_model: ClassVar[Any] = None  # a pydantic BaseModel subclass validating ``backend_config``, or None

    @classmethod
    @abc.abstractmethod
    def from_config(cls, main_config: dict[str, Any], *, handle: dict[str, Any] | None = None) -> RemoteBackend:
        """Start the backend (``handle`` is None) or reconnect to a running one (start nothing).

        ``main_config``: ``{"pipeline": <resolved pipeline dict>, "resource": <name>,
        "backend_config": <the resource's config dict>, "project_root": <str>, "run_dir": <str or
        None>}``. ``run_dir`` is the run's directory (absolute), where a backend may write its logs
        (under ``backends/``); it is None outside a run (``rlflow backend serve``). On failure,
        raise and leave nothing running.
        """

    @abc.abstractmethod
    def reconnect_handle(self) -> dict[str, Any]:
        """A JSON-able dict from which ``from_config(main_config, handle=...)`` reconnects, in any process."""

    @abc.abstractmethod
    def destroy(self) -> None | Awaitable[None]:
        """Release what this instance started; idempotent. May be a coroutine function."""

    def load_rollout_weights(self, state: dict[str, Any], global_steps: int) -> dict[str, float]:
        """Serve ``state`` (the actor's CPU tensors by name, tied weights once) as policy version
        ``global_steps`` from the next ``generate`` on; ``sync/*`` metrics. Optional: a backend that
        implements it sets ``accepts_rollout_weights = True``. A ``generate`` must use one version
        whole (never part old, part new weights) and report it as ``rollout/policy_version``.
        """
        raise NotImplementedError(
            f"remote backend {type(self).__name__} cannot take rollout weights from a local actor "
            "(it does not set accepts_rollout_weights); bind update_actor to the backend too"
        )

    def requires_single_forwarder(self) -> bool:
        """True when more than one forwarder would split work the backend must see whole."""
        return type(self).single_forwarder


def check_main_config(main_config: Any, backend: str) -> dict[str, Any]:
    """``main_config['backend_config']`` after checking the main_config's shape (a clear error otherwise)."""
    if not isinstance(main_config, dict):
        raise BackendError(f"remote backend {backend!r}: main_config must be a dict, got {type(main_config).__name__}")
    missing = [key for key in MAIN_CONFIG_KEYS if key not in main_config]
    if missing:
        raise BackendError(
            f"remote backend {backend!r}: main_config lacks {', '.join(missing)} "
            f"(it needs {', '.join(MAIN_CONFIG_KEYS)})"
        )
    config = main_config["backend_config"]
    if not isinstance(config, dict):
        raise BackendError(f"remote backend {backend!r}: backend_config must be a dict, got {type(config).__name__}")
    run_dir = main_config["run_dir"]
    if run_dir is not None and not isinstance(run_dir, str):
        raise BackendError(
            f"remote backend {backend!r}: run_dir must be a path string or null, got {type(run_dir).__name__}"
        )
    return config


def destroy_backend(backend: RemoteBackend) -> None:
    """Call ``backend.destroy()`` and wait for it, whether it is sync or async.

    Safe to call from inside a running event loop: a coroutine is then run to completion on a
    helper thread with its own loop (the caller's loop is not re-entered).
    """
    result = backend.destroy()
    if not inspect.isawaitable(result):
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(_await(result))
        return
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(_await(result))
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="rlflow-destroy-backend")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


async def adestroy_backend(backend: RemoteBackend) -> None:
    """The async twin of ``destroy_backend`` for async forwarders and drivers."""
    result = backend.destroy()
    if inspect.isawaitable(result):
        await result


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
