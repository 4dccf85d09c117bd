"""Which engine does the work of a local pool: names, the extras they need, and the factory.

A pipeline picks its engines per stage: ``update_actor.with.engine`` (``torch`` or
``deepspeed``, with ``zero_stage``), the log-prob stages' ``with.engine`` (the same two) and
``generate.with.engine`` (``torch``, ``hf`` or ``vllm``). Design decisions:

- Pure at import: this module imports neither torch nor deepspeed nor vllm, so validation can
  ask ``missing_extra`` whether an engine is installed (``importlib.util.find_spec``, which
  finds a package without importing it) in a fraction of a second.
- The caller reads the choices off the pipeline's stages (``rlflow.check.engines``: a backend
  knows no stage kinds) and hands them over as an ``EngineChoice``; ``EngineChoice.problem``
  is the one rule the validator and the factory both apply. ``create_local_engine`` builds a
  plain ``LocalEngine`` when every choice is torch/hf and the ``ConfiguredLocalEngine``
  otherwise; engine classes are imported only when chosen, so the CPU default never imports
  DeepSpeed or vLLM.
- A missing engine is a ``BackendError`` naming the extra that installs it.
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
    if choice.training == "deepspeed" and (roles is None or "actor" in roles):
        require("deepspeed", "update_actor.with.engine")
    if choice.rollout == "vllm" and (roles is None or "rollout" in roles):
        require("vllm", "generate.with.engine")
    if choice.default:
        from rlflow.backends.local.local_engine import LocalEngine

        return LocalEngine(pipeline, **kwargs)
    from rlflow.backends.local.configured import ConfiguredLocalEngine

    return ConfiguredLocalEngine(pipeline, choice=choice, **kwargs)
