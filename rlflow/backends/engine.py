"""The one small interface stages call: ``Engine``.

A local pool's worker holds a local engine, a remote resource's forwarder a client that relays the same calls;
stages never know which. Calls take and return plain data (``Batch`` objects, JSON-able dicts).
Design notes: docs/design/engine.md.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from rlflow.errors import BackendError

if TYPE_CHECKING:  # pragma: no cover - torch stays out of imports that only need the interface
    from rlflow.batch import Batch


class Engine(abc.ABC):
    """Actor + rollout (+ reference) roles of one worker."""

    @abc.abstractmethod
    def generate(self, batch: Batch, params: dict[str, Any]) -> Batch:
        """Sample one response per row of ``batch`` (rows already repeated n times).

        ``params``: temperature, top_p, top_k, do_sample, max_response_length, seed, and max_num_seqs
        (the most rows to decode at once, None for the engine to choose; an engine may ignore it).
        Returns a Batch with ``responses`` [B, R] (right-padded with pad id), ``response_mask`` [B, R]
        and ``response_text`` (list[str]); metrics may carry ``timing``/token counts. An engine that
        knows each response token's log-prob as sampled adds ``rollout_log_probs`` [B, R] (0 outside
        the mask), from which the step's ``training/rollout_probs_diff_*`` and ``rollout_corr/*`` come.
        ``params["multi_turn"]`` (verl's block, when enabled) asks for tool-calling transcripts: the
        mask is then 0 on tool tokens between the model's turns, and ``num_turns`` /
        ``tool_call_counts`` [B] come back too (the local engine runs ``rlflow.backends.agent_loop``).
        """

    @abc.abstractmethod
    def compute_log_prob(self, batch: Batch, params: dict[str, Any]) -> Batch:
        """Current actor: ``old_log_probs`` [B, R] and ``entropys`` [B, R] of the responses."""

    @abc.abstractmethod
    def compute_ref_log_prob(self, batch: Batch, params: dict[str, Any]) -> Batch:
        """Frozen reference policy: ``ref_log_prob`` [B, R]."""

    @abc.abstractmethod
    def update_actor(self, batch: Batch, params: dict[str, Any]) -> dict[str, float]:
        """PPO/GRPO update over mini-batches and epochs; returns verl-named ``actor/*`` metrics."""

    @abc.abstractmethod
    def update_weights(self, global_steps: int) -> dict[str, float]:
        """Make the rollout use the actor's current weights; returns ``sync/*`` metrics (bytes, seconds)."""

    @abc.abstractmethod
    def set_global_steps(self, global_steps: int) -> None:
        """Tell the rollout which policy version it now serves."""

    def compute_values(self, batch: Batch, params: dict[str, Any]) -> Batch:
        """The critic: ``values`` [B, R] of the response tokens (0 outside the mask). Only an engine that holds
        the critic implements it."""
        raise BackendError(f"{type(self).__name__} cannot compute values: it holds no critic")

    def update_critic(self, batch: Batch, params: dict[str, Any]) -> dict[str, float]:
        """The critic's update on ``returns``; verl-named ``critic/*`` metrics. Only an engine that holds the
        critic implements it."""
        raise BackendError(f"{type(self).__name__} cannot update a critic: it holds none")

    def compute_rm_score(self, batch: Batch, params: dict[str, Any]) -> Batch:
        """The reward model: ``rm_scores`` [B] (float32), one score per (prompt, response) row, from ``raw_prompt``
        and ``response_text``. Only an engine that holds a reward model implements it."""
        raise BackendError(f"{type(self).__name__} cannot score with a reward model: it holds none")

    def judge(self, batch: Batch, params: dict[str, Any]) -> Batch:
        """The generative judge: ``verdict_text`` (list[str]), one verdict per row of ``judge_prompt`` (list of
        chat messages lists). Only an engine that holds a judge implements it."""
        raise BackendError(f"{type(self).__name__} cannot judge: it holds no judge model")

    def compute_teacher_log_probs(self, batch: Batch, params: dict[str, Any]) -> Batch:
        """The teachers: ``teacher_logprobs`` [B, R, K] of the response tokens (K = 1: the token's own; else the
        teacher's top-k, with ``teacher_ids`` [B, R, K]), each row by its teacher (``params["teachers"]``, one
        name per row). Only an engine that holds the teachers implements it."""
        raise BackendError(f"{type(self).__name__} cannot compute teacher log-probs: it holds no teacher")

    def export_weights(self) -> dict[str, Any]:
        """The actor's weights as CPU tensors by name (tied weights once), for a rollout on another pool.
        Only an engine that holds the actor implements it."""
        raise BackendError(f"{type(self).__name__} cannot export weights: it holds no actor")

    def load_rollout_weights(self, state: dict[str, Any], global_steps: int) -> dict[str, float]:
        """Serve ``state`` (``export_weights``'s) as policy version ``global_steps`` from the next ``generate``
        on; ``sync/*`` metrics. Only an engine whose rollout takes weights from another pool implements it."""
        raise BackendError(f"{type(self).__name__} cannot take rollout weights from an actor on another pool")

    @abc.abstractmethod
    def save_checkpoint(self, path: str, global_steps: int) -> dict[str, Any]:
        """Write model, optimizer, scheduler and RNG state under ``path`` (a directory)."""

    @abc.abstractmethod
    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """Restore what ``save_checkpoint`` wrote."""

    def close(self) -> None:  # noqa: B027  (optional: most engines hold nothing to release)
        """Release what the engine holds (process groups, sockets, child processes). Default: nothing."""
