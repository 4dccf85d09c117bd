"""``inproc_example``: the smallest complete RemoteBackend plugin, for plugin authors to copy.

It runs rlflow's own local engine *inside the forwarder process*: ``from_config`` starts
nothing and hands out a handle naming the backend instance; the engine is built on first use
in whichever process uses it, and shared there by every instance holding the same handle.
In a run only the (single) forwarder makes calls, so the model lives there.

Design decisions a real plugin makes differently:
- A real backend starts its server (and GPUs) in ``from_config`` without a handle, and
  ``from_config(handle=...)`` only connects to it; see rlflow's ``reference`` backend.
- ``single_forwarder = True``: the model lives in the forwarder's process, so a second
  forwarder would hold a second, diverging model.
- One call at a time: a backend must accept a ``generate`` while an update is in flight
  elsewhere (an overlapped run issues both), and the model is not thread-safe, so every call
  waits for the one before it.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

from rlflow.backends.engine import Engine
from rlflow.backends.remote import RemoteBackend, register
from rlflow.errors import BackendError

_ENGINES: dict[str, Engine] = {}  # backend id -> engine, per process
_LOCK = threading.Lock()
_CALLS = threading.Lock()  # one engine call at a time, whichever instance (connection) makes it


@register("inproc_example")
class InProcessBackend(RemoteBackend):
    single_forwarder = True

    def __init__(self, main_config: dict[str, Any], backend_id: str) -> None:
        self._main_config = main_config
        self._id = backend_id

    @classmethod
    def from_config(cls, main_config: dict[str, Any], *, handle: dict[str, Any] | None = None) -> InProcessBackend:
        if handle is None:
            return cls(main_config, uuid.uuid4().hex)
        if not isinstance(handle.get("id"), str):
            raise BackendError(f"inproc_example: a handle needs an 'id' string, got {handle!r}")
        return cls(main_config, handle["id"])

    def reconnect_handle(self) -> dict[str, Any]:
        return {"id": self._id}

    def destroy(self) -> None:
        self.close()

    def close(self) -> None:
        with _LOCK:
            engine = _ENGINES.pop(self._id, None)
        if engine is not None:
            engine.close()

    def _engine(self) -> Engine:
        with _LOCK:
            if self._id not in _ENGINES:
                from rlflow.backends.local.local_engine import LocalEngine
                from rlflow.schemas.pipeline import Pipeline

                _ENGINES[self._id] = LocalEngine(
                    Pipeline.model_validate(self._main_config["pipeline"]),
                    device="cpu",
                    project_root=Path(self._main_config["project_root"]),
                )
            return _ENGINES[self._id]

    # The Engine calls: delegation, one at a time.
    def _call(self, method: str, *args):
        engine = self._engine()
        with _CALLS:
            return getattr(engine, method)(*args)

    def generate(self, batch, params):
        return self._call("generate", batch, params)

    def compute_log_prob(self, batch, params):
        return self._call("compute_log_prob", batch, params)

    def compute_ref_log_prob(self, batch, params):
        return self._call("compute_ref_log_prob", batch, params)

    def update_actor(self, batch, params):
        return self._call("update_actor", batch, params)

    def update_weights(self, global_steps):
        return self._call("update_weights", global_steps)

    def set_global_steps(self, global_steps):
        self._call("set_global_steps", global_steps)

    def save_checkpoint(self, path, global_steps):
        return self._call("save_checkpoint", path, global_steps)

    def load_checkpoint(self, path):
        return self._call("load_checkpoint", path)
