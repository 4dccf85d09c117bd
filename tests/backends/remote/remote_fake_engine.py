"""A deterministic stand-in Engine for unit tests of the wire, server and client layers.

Outputs are plain functions of the inputs and of a counter of applied updates, so a test can
tell from any reply how many times ``update_actor`` really ran inside the server. The
conformance kit and the end-to-end tests use the real local engine instead.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from rlflow.backends.engine import Engine
from rlflow.batch import Batch


class FakeEngine(Engine):
    def __init__(self) -> None:
        self.updates = 0
        self.served = 0
        self.global_steps = 0

    def generate(self, batch: Batch, params: dict) -> Batch:
        time.sleep(float(params.get("sleep_s", 0.0)))
        width = int(params.get("max_response_length", 4))
        base = batch["prompts"].sum(-1, keepdim=True)
        responses = (base + torch.arange(width)) % 97
        mask = torch.ones_like(responses)
        mask[1::2, width // 2 :] = 0  # odd rows stop halfway, right-padded
        text = [f"r{int(row)}" for row in base.squeeze(-1).tolist()]
        return Batch(
            {"responses": responses, "response_mask": mask},
            {"response_text": text},
            {"fake/served_version": float(self.served)},
        )

    def compute_log_prob(self, batch: Batch, params: dict) -> Batch:
        logp = -(batch["responses"].float() + 1) / 100 * (1 + self.updates)
        return Batch({"old_log_probs": logp, "entropys": -logp})

    def compute_ref_log_prob(self, batch: Batch, params: dict) -> Batch:
        return Batch({"ref_log_prob": -(batch["responses"].float() + 1) / 100})

    def update_actor(self, batch: Batch, params: dict) -> dict:
        time.sleep(float(params.get("sleep_s", 0.0)))
        self.updates += 1
        return {"actor/pg_loss": float(batch["advantages"].sum()), "actor/updates_applied": float(self.updates)}

    def update_weights(self, global_steps: int) -> dict:
        self.served = self.updates
        return {"sync/bytes": 0.0, "fake/updates_applied": float(self.updates)}

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    def save_checkpoint(self, path: str, global_steps: int) -> dict:
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "fake.json").write_text(json.dumps({"updates": self.updates, "global_steps": global_steps}))
        return {"path": path}

    def load_checkpoint(self, path: str) -> dict:
        state = json.loads((Path(path) / "fake.json").read_text())
        self.updates = state["updates"]
        return {"global_steps": state["global_steps"]}


class WeightsEngine(FakeEngine):
    """Also takes rollout weights (``load_rollout_weights``): keeps each state it was given, whole."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[dict[str, torch.Tensor]] = []

    def load_rollout_weights(self, state: dict[str, torch.Tensor], global_steps: int) -> dict:
        self.loaded.append({k: v.clone() for k, v in state.items()})
        self.set_global_steps(global_steps)
        return {"sync/bytes": float(sum(t.numel() * t.element_size() for t in state.values()))}


class VersionlessWeightsEngine(WeightsEngine):
    """A served engine written before the version travelled with the weights: ``load_rollout_weights(state)``."""

    def load_rollout_weights(self, state: dict[str, torch.Tensor]) -> dict:  # type: ignore[override]
        self.loaded.append({k: v.clone() for k, v in state.items()})
        return {"sync/bytes": 1.0}


class ShortResponses(FakeEngine):
    """Breaks the rollout contract: its responses are one column short of ``max_response_length``."""

    def generate(self, batch: Batch, params: dict) -> Batch:
        return super().generate(batch, {**params, "max_response_length": int(params["max_response_length"]) - 1})


def build(main_config: dict) -> FakeEngine:
    """Engine factory for ``config: {engine: "remote_fake_engine:build"}``."""
    return FakeEngine()


def short(main_config: dict) -> FakeEngine:
    """Engine factory of a backend that returns responses one column short."""
    return ShortResponses()


def explode(main_config: dict) -> FakeEngine:
    raise RuntimeError("the fake engine refuses to start (resource arctic)")


def hang(main_config: dict) -> FakeEngine:
    time.sleep(600)
    return FakeEngine()
