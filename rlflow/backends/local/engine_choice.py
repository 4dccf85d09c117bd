"""``EngineChoice``: the engines a pipeline asks of its local pools, and the one rule about combining them.

Pure data (no torch): the validator (``rlflow.check.engines``), the factory and ``ConfiguredLocalEngine``
all import it from here.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    def problem(self) -> str | None:
        """Why these engines cannot work together, or None: the actor's log-probs run in its training engine."""
        if self.log_prob == "deepspeed" and self.training != "deepspeed":
            return (
                f"old_log_prob runs on deepspeed but update_actor on {self.training}: the actor's log-probs run "
                "in its training engine; set both to deepspeed, or both to torch"
            )
        return None
