"""Remote backends: the ``RemoteBackend`` ABC, its registry, and the built-in ``reference`` backend.

Import from here: ``RemoteBackend``, ``register``, ``get``, ``create_backend``,
``connect_backend``, ``list_backends``, ``destroy_backend``, ``adestroy_backend``.
The wire, server and client modules import torch and are loaded only when a backend runs.
"""

from rlflow.backends.remote.base import RemoteBackend, adestroy_backend, destroy_backend
from rlflow.backends.remote.registry import (
    ENTRY_POINT_GROUP,
    REMOTE_BACKENDS,
    connect_backend,
    create_backend,
    get,
    list_backends,
    register,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "REMOTE_BACKENDS",
    "RemoteBackend",
    "adestroy_backend",
    "connect_backend",
    "create_backend",
    "destroy_backend",
    "get",
    "list_backends",
    "register",
]
