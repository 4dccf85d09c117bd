"""Which engine does the work of a local pool: names, the extras they need, and the factory.

Pure at import (validation asks ``missing_extra`` without importing torch, deepspeed or vllm);
``create_local_engine`` builds the engine an ``EngineChoice`` asks for. Design notes: docs/design/local_engine.md.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from rlflow.backends.local.engine_choice import EngineChoice
from rlflow.errors import BackendError

TRAINING_ENGINES = ("torch", "deepspeed")
ROLLOUT_ENGINES = ("torch", "hf", "vllm")
# engine -> (the module it imports, the rlflow extra that installs it)
_EXTRAS = {"deepspeed": ("deepspeed", "deepspeed"), "vllm": ("vllm", "vllm")}


def missing_extra(engine_name: str) -> str | None:
    """``None`` when ``engine_name`` can run here, else a message naming the extra to install.

    Engines built on torch alone (``torch``, ``hf``) are always available; an unknown name is
    not this function's business (the stage config models reject it) and returns ``None``.
    """
    if engine_name not in _EXTRAS:
        return None
    module, extra = _EXTRAS[engine_name]
    if importlib.util.find_spec(module) is not None:
        return None
    return f"engine {engine_name!r} needs the {extra} extra: pip install 'rlflow[{extra}]'"


def require(engine_name: str, where: str) -> None:
    """Raise ``BackendError`` naming ``where`` and the extra when ``engine_name`` is not installed."""
    message = missing_extra(engine_name)
    if message is not None:
        raise BackendError(f"{where}: {message}")


def create_local_engine(pipeline, choice: EngineChoice, **kwargs: Any):
    """The local engine for ``pipeline`` with the engines of ``choice`` (keyword arguments as ``LocalEngine``)."""
    if choice.problem():
        raise BackendError(choice.problem())
    roles = kwargs.get("roles")
    if choice.training == "deepspeed" and (roles is None or {"actor", "critic"} & set(roles)):
        require("deepspeed", "update_actor.with.engine")
    if choice.rollout == "vllm" and (roles is None or "rollout" in roles):
        require("vllm", "generate.with.engine")
    if choice.default:
        from rlflow.backends.local.local_engine import LocalEngine

        return LocalEngine(pipeline, **kwargs)
    from rlflow.backends.local.configured import ConfiguredLocalEngine

    return ConfiguredLocalEngine(pipeline, choice=choice, **kwargs)
