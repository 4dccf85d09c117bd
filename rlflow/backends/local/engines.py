"""Which engine does the work of a local pool: names, the extras they need, and the factory.

A pipeline picks its engines per stage: ``update_actor.with.engine`` (``torch`` or
``deepspeed``, with ``zero_stage``), the log-prob stages' ``with.engine`` (the same two) and
``generate.with.engine`` (``torch``, ``hf`` or ``vllm``). Design decisions:

- Pure at import: this module imports neither torch nor deepspeed nor vllm, so validation can
  ask ``missing_extra`` whether an engine is installed (``importlib.util.find_spec``, which
  finds a package without importing it) in a fraction of a second.
- One place decides: ``engine_choice`` reads the stage configs, ``create_local_engine`` builds
  a plain ``LocalEngine`` when every choice is torch/hf and the ``ConfiguredLocalEngine``
  otherwise; engine classes are imported only when chosen, so the CPU default never imports
  DeepSpeed or vLLM.
- A missing engine is a ``BackendError`` naming the extra that installs it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class EngineChoice:
    """The engines a pipeline asks of its local pools."""

    training: str = "torch"
    zero_stage: int = 0
    log_prob: str = "torch"
    rollout: str = "torch"

    @property
    def default(self) -> bool:
        """True when plain ``LocalEngine`` does everything (no DeepSpeed, no vLLM)."""
        return self.training == "torch" and self.rollout in ("torch", "hf")


def _stage_config(pipeline, kind: str):
    from rlflow.stages import get_stage_kind

    stages = pipeline.stages_using(kind)
    return get_stage_kind(kind).parse_config(stages[0].with_) if stages else None


def engine_choice(pipeline) -> EngineChoice:
    """The engines of ``pipeline``; a log-prob stage on DeepSpeed needs update_actor on DeepSpeed."""
    update = _stage_config(pipeline, "update_actor")
    generate = _stage_config(pipeline, "generate")
    log_prob = _stage_config(pipeline, "old_log_prob")
    choice = EngineChoice(
        training=update.engine if update else "torch", zero_stage=update.zero_stage if update else 0,
        log_prob=log_prob.engine if log_prob else "torch", rollout=generate.engine if generate else "torch",
    )
    if choice.log_prob == "deepspeed" and choice.training != "deepspeed":
        raise BackendError("old_log_prob.with.engine is deepspeed but update_actor.with.engine is "
                           f"{choice.training}: the actor's log-probs run in its training engine; set both to deepspeed")
    return choice


def create_local_engine(pipeline, **kwargs: Any):
    """The local engine for ``pipeline`` (same keyword arguments as ``LocalEngine``)."""
    choice = engine_choice(pipeline)
    roles = kwargs.get("roles")
    if choice.training == "deepspeed" and (roles is None or "actor" in roles):
        require("deepspeed", "update_actor.with.engine")
    if choice.rollout == "vllm" and (roles is None or "rollout" in roles):
        require("vllm", "generate.with.engine")
    if choice.default:
        from rlflow.backends.local.engine import LocalEngine

        return LocalEngine(pipeline, **kwargs)
    from rlflow.backends.local.configured import ConfiguredLocalEngine

    return ConfiguredLocalEngine(pipeline, choice=choice, **kwargs)
